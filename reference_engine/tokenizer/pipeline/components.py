"""The shared mechanics of tokenizer.json components (normalizers, pre-tokenizers, decoders, post-processors):
each section maps a `type` to a builder, and `Sequence` chains built steps in order."""
from __future__ import annotations

from typing import Callable

from reference_engine.errors import UnsupportedError


def chain(steps: list[Callable]) -> Callable:
    """One callable that feeds its input through every step in order."""
    def run(value):
        for step in steps:
            value = step(value)
        return value

    return run


def build_component(section: str, builders: dict[str, Callable], spec: dict | None, path: str):
    """The component a tokenizer.json `section` entry describes (None when absent); unknown types are refused."""
    if spec is None:
        return None
    kind = spec.get("type")
    if kind not in builders:
        raise UnsupportedError(path, f"{section} type {kind!r} is not supported")
    return builders[kind](spec, path)
