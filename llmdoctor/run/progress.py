"""A one-line progress bar on stderr, drawn only when stderr is a terminal (CI logs stay clean)."""
from __future__ import annotations

import shutil
import sys
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None):
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_tty(self.stream) if enabled is None else enabled

    def start(self, label: str) -> None:
        """Show that the check named `label` is now running."""
        self._label = label
        if self.enabled:
            self._draw(label)

    def advance(self) -> None:
        self.done += 1

    def layer(self, done: int, total: int, bytes_read: int) -> None:
        """A streaming pass reached layer `done` of `total` (llmdoctor/run/runner.py hands this to the engine)."""
        if self.enabled:
            self._label = getattr(self, "_label", "")
            self._draw(f"{self._label} | layer {done}/{total}, {bytes_read / 1e9:.1f} GB read")

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * self._width() + "\r")
            self.stream.flush()

    def _draw(self, label: str) -> None:
        width = self._width()
        bar_width = 20
        filled = bar_width * self.done // max(self.total, 1)
        text = f"[{'#' * filled}{'.' * (bar_width - filled)}] {self.done}/{self.total} {label}"
        self.stream.write("\r" + text[:width].ljust(width))
        self.stream.flush()

    @staticmethod
    def _width() -> int:
        return max(shutil.get_terminal_size((80, 24)).columns - 1, 20)


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
