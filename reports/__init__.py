"""Report renderers. Each module has `render(report, stream)` and knows only `findings`."""
from __future__ import annotations

from importlib import import_module
from typing import TextIO

FORMATS = ("table", "json", "junit", "markdown", "html", "sarif", "github", "gitlab")


def render(report, fmt: str, stream: TextIO, **options) -> None:
    """Write `report` to `stream` in one of FORMATS."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (expected one of: {', '.join(FORMATS)})")
    import_module(f"{__name__}.{fmt}").render(report, stream, **options)
