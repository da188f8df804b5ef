"""Settings from `[tool.llmdoctor]` in a pyproject.toml or the top level of an llmdoctor.toml.

Search order, first hit wins (no merging, so what applies is easy to tell): llmdoctor.toml next to the model,
pyproject.toml next to the model, llmdoctor.toml in the working directory, pyproject.toml there. A
pyproject.toml without a [tool.llmdoctor] table is not a config. Command-line options override every key.

    [tool.llmdoctor]
    select = ["ALL"]
    ignore = ["GPU", "generation"]
    fail-on = "warning"
    [tool.llmdoctor.thresholds.EMB002]
    max_norm_ratio = 8.0
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from findings import FAIL_ON

try:
    import tomllib as _toml
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as _toml
    except ModuleNotFoundError:
        _toml = None

KEYS = ("select", "ignore", "fail-on", "device", "dtype", "quick", "thresholds", "memory-budget")
CHOICES = {"fail-on": FAIL_ON, "device": ("auto", "cpu", "cuda"),
           "dtype": ("auto", "float32", "bfloat16", "float16")}


class ConfigFileError(ValueError):
    """The configuration file exists but cannot be used; the message names the file and the key."""


@dataclass
class Settings:
    select: list[str] | None = None
    ignore: list[str] | None = None
    fail_on: str | None = None
    device: str | None = None
    dtype: str | None = None
    quick: bool | None = None
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: Path | None = None     # the file these came from
    memory_budget: str | int | None = None   # "4GiB" or bytes (reference_engine/budget/plan.py parse_size)


def candidate_files(model_dir: Path | None, cwd: Path) -> list[Path]:
    dirs = [d for d in (model_dir, cwd) if d is not None]
    seen, out = set(), []
    for d in dirs:
        for name in ("llmdoctor.toml", "pyproject.toml"):
            path = (d / name).resolve()
            if path not in seen:
                seen.add(path)
                out.append(d / name)
    return out


def load_settings(model_dir: str | Path | None = None, cwd: str | Path | None = None) -> Settings:
    """The settings that apply to a run on model_dir from cwd (empty Settings when there is no config)."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    for path in candidate_files(Path(model_dir) if model_dir else None, cwd):
        if not path.is_file():
            continue
        table = read_table(path)
        if table is not None:
            return parse_settings(table, path)
    return Settings()


def read_table(path: Path) -> dict | None:
    """The llmdoctor table of a config file; None for a pyproject.toml without one."""
    if _toml is None:
        warnings.warn(f"{path}: ignored (reading TOML needs Python 3.11+ or the 'tomli' package)", stacklevel=2)
        return None
    try:
        data = _toml.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, OSError) as e:
        raise ConfigFileError(f"{path}: cannot read: {e}") from None
    except _toml.TOMLDecodeError as e:
        raise ConfigFileError(f"{path}: invalid TOML: {e}") from None
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("llmdoctor")
        if table is not None and not isinstance(table, dict):
            raise ConfigFileError(f"{path}: [tool.llmdoctor] must be a table")
        return table
    return data


def parse_settings(table: dict, path: Path) -> Settings:
    where = f"{path}: [tool.llmdoctor]" if path.name == "pyproject.toml" else f"{path}:"
    table = {k.replace("_", "-"): v for k, v in table.items()}
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigFileError(f"{where} unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    for key, choices in CHOICES.items():
        if key in table and table[key] not in choices:
            raise ConfigFileError(f"{where} {key} must be one of {', '.join(choices)}, found {table[key]!r}")
    if "quick" in table and not isinstance(table["quick"], bool):
        raise ConfigFileError(f"{where} quick must be true or false, found {table['quick']!r}")
    if "memory-budget" in table:
        from reference_engine.budget.plan import parse_size
        try:
            parse_size(table["memory-budget"])
        except ValueError as e:
            raise ConfigFileError(f"{where} memory-budget: {e}") from None
    return Settings(select=_selectors(table, "select", where), ignore=_selectors(table, "ignore", where),
                    fail_on=table.get("fail-on"), device=table.get("device"), dtype=table.get("dtype"),
                    quick=table.get("quick"), thresholds=_thresholds(table.get("thresholds", {}), where),
                    source=path, memory_budget=table.get("memory-budget"))


def _selectors(table: dict, key: str, where: str) -> list[str] | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigFileError(f"{where} {key} must be a list of strings, found {value!r}")
    return value


def _thresholds(value: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ConfigFileError(f"{where} thresholds must be tables like [tool.llmdoctor.thresholds.EMB002]")
    return {check_id.upper(): dict(names) for check_id, names in value.items()}
