"""The check catalogue: one package per check family (`checks/<family>/`), each holding its checks and the analysis
only it uses; `checks/shared/` holds what several families share. `load_all()` imports every module below
`checks/` but the catalogue's machinery (`checks/catalogue/`), so a new check module needs no central list."""
from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass
from pathlib import Path

from checks.catalogue.registry import REGISTRY, CheckSpec, Problem, RegistryError, Skip, check, specs

MACHINERY = "catalogue"     # the subpackage holding the registry and the inputs: no checks in it

__all__ = ["REGISTRY", "CheckSpec", "Problem", "RegistryError", "Skip", "check", "specs", "load_all",
           "LoadError", "load_errors"]


@dataclass(frozen=True)
class LoadError:
    """A check module that failed to import; the runner reports it as a crashed check so it is never silent."""
    module: str
    message: str
    traceback: str


_load_errors: dict[str, LoadError] = {}
_loaded = False


def check_module_names() -> list[str]:
    """Every module below checks/ (dotted, without the leading `checks.`), packages included, machinery left out."""
    root = Path(__file__).parent
    names = (".".join(path.relative_to(root).with_suffix("").parts) for path in root.rglob("*.py"))
    return sorted(n for n in names if not any(part.startswith("_") for part in n.split("."))
                  and n.split(".")[0] != MACHINERY)


def load_all() -> list[CheckSpec]:
    """Import every check module once and return the catalogue in order."""
    global _loaded
    if not _loaded:
        for name in check_module_names():
            full = f"{__name__}.{name}"
            try:
                importlib.import_module(full)
            except Exception as e:  # one broken module must not take the whole tool down
                _load_errors[full] = LoadError(full, f"{type(e).__name__}: {e}", traceback.format_exc())
        _loaded = True
    return specs()


def load_errors() -> list[LoadError]:
    load_all()
    return list(_load_errors.values())
