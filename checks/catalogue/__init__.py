"""The catalogue's machinery, not checks: `registry.py` (`@check`, `CheckSpec`, `SharedRun`, the catalogue itself)
and `inputs.py` (`CheckInputs`, what a check run hands each check, built lazily). `checks.load_all()` imports every
module below `checks/` but this package."""
