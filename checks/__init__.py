"""The check catalogue. Every module `checks/<name>.py` (except the machinery below) is a check module and is
imported by `load_all()`; there is no central list to edit."""
from __future__ import annotations

import importlib
import pkgutil
import traceback
from dataclasses import dataclass

from checks.registry import REGISTRY, CheckSpec, Problem, RegistryError, Skip, check, specs

MACHINERY = {"registry", "context", "engine_builder", "analysis"}

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
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_") and m.name not in MACHINERY)


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
