"""What a command runs on when PATH may be a LoRA adapter: (base model, adapter directory or None).

`check ADAPTER_DIR --base BASE` runs on BASE with the adapter merged in. Without --base, the base is
adapter_config.json's `base_model_name_or_path` when that names an existing local directory or GGUF file
(a hub id is never fetched): anything else is a usage error saying to pass --base.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmdoctor.run.output_guard import refuse_inside_model


class AdapterUsageError(ValueError):
    """An adapter given without a base that can be found, or --base without an adapter; exit 2, one line."""


@dataclass(frozen=True)
class Target:
    base: Path
    adapter: Path | None = None

    @property
    def label(self) -> str:
        return str(self.base) if self.adapter is None else f"{self.adapter} (LoRA on {self.base})"

    def refuse_output(self, output, what: str = "report") -> None:
        """-o never lands in the base model nor in the adapter directory."""
        refuse_inside_model(output, self.base, what)
        if self.adapter is not None:
            refuse_inside_model(output, self.adapter, what)


def is_adapter(path: str | Path | None) -> bool:
    return path is not None and Path(path).is_dir() and (Path(path) / "adapter_config.json").is_file()


def resolve(path: str | Path, base: str | Path | None = None, option: str = "--base") -> Target:
    """The base and adapter PATH stands for (PATH itself when it is no adapter and no base is given)."""
    if not is_adapter(path):
        if base is not None:
            raise AdapterUsageError(f"{path}: {option} is for a LoRA adapter directory (adapter_config.json), "
                                    f"and this is not one")
        return Target(Path(path))
    adapter = Path(path)
    if base is None:
        base = declared_base(adapter)
        if base is None:
            raise AdapterUsageError(f"{adapter}: a LoRA adapter; pass {option} BASE (the base model directory or "
                                    f"GGUF file): {declared_text(adapter)}")
    if is_adapter(base):
        raise AdapterUsageError(f"{base}: {option} must be a base model, not another adapter")
    if not Path(base).exists():
        raise AdapterUsageError(f"{base}: {option}: no such model directory or GGUF file")
    return Target(Path(base), adapter)


def declared_base(adapter: Path) -> Path | None:
    """base_model_name_or_path when it names a local model directory or GGUF file, else None."""
    name = _declared(adapter)
    if not name:
        return None
    path = Path(name) if Path(name).is_absolute() else adapter / name if (adapter / name).exists() else Path(name)
    if path.is_dir() and not is_adapter(path):
        return path
    if path.is_file() and path.suffix == ".gguf":
        return path
    return None


def declared_text(adapter: Path) -> str:
    name = _declared(adapter)
    if not name:
        return "adapter_config.json names no base_model_name_or_path"
    return f"base_model_name_or_path {name!r} is not a local model directory or GGUF file"


def _declared(adapter: Path) -> str | None:
    from reference_engine.config import read_json
    value = read_json(adapter / "adapter_config.json").get("base_model_name_or_path")
    return value if isinstance(value, str) and value else None
