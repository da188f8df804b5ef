"""One rule for every writer (`check -o`, `baseline -o`, `triage -o`, `fix -o`, the probes' `-o` and `--save-trace`):
llmdoctor never writes into the model directory it examines. Symlinks are resolved first, so a link pointing into
the model is refused too."""
from __future__ import annotations

from pathlib import Path


class OutputError(ValueError):
    """An output path that cannot be written (a file where a directory is needed, ...); exit 2, one line."""


class InsideModelError(OutputError):
    """An output path lies inside (or is) the model directory; a usage error (exit 2, one line)."""


def is_inside(path: str | Path, directory: str | Path) -> bool:
    """True when `path` is `directory` or anything below it (both resolved, symlinks followed)."""
    out, model = Path(path).resolve(), Path(directory).resolve()
    return out == model or model in out.parents


def refuse_inside_model(output: str | Path | None, model_dir: str | Path | None, what: str = "output") -> None:
    """Raise InsideModelError when `output` would land in `model_dir`; no output or no model is always fine."""
    if output is not None and model_dir is not None and is_inside(output, model_dir):
        raise InsideModelError(f"{output}: refusing to write the {what} inside the model directory {model_dir} "
                               "(llmdoctor never writes into a model)")
