"""Errors the engine raises for bad input. Each names the file and the problem in one line."""
from __future__ import annotations

from pathlib import Path


class ModelDirError(ValueError):
    """A model directory (or a file in it) cannot be used: missing, malformed, hostile or unsupported."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UnsupportedError(ModelDirError):
    """The file is well formed but uses a feature the reference engine does not implement."""
