"""Normalizers: text -> text rewrites applied before pre-tokenization (tokenizer.json `normalizer`)."""
from __future__ import annotations

import unicodedata
from typing import Callable

import regex

from reference_engine.tokenizer.pipeline.components import build_component, chain
from reference_engine.errors import UnsupportedError

Normalizer = Callable[[str], str]

# Rust's char::is_whitespace is the Unicode White_Space property; Python's str.strip also strips
# \x1c-\x1f, which tokenizers keeps, so strip with an explicit class.
_LEADING_SPACE = regex.compile(r"^\p{White_Space}+")
_TRAILING_SPACE = regex.compile(r"\p{White_Space}+$")


def unicode_form(form: str) -> Normalizer:
    return lambda text: unicodedata.normalize(form, text)


def lowercase(spec: dict, path: str) -> Normalizer:
    return str.lower


def prepend(spec: dict, path: str) -> Normalizer:
    prefix = spec.get("prepend", "▁")
    return lambda text: prefix + text if text else text


def replace(spec: dict, path: str) -> Normalizer:
    pattern, content = spec.get("pattern", {}), spec.get("content", "")
    if "String" in pattern:
        literal = pattern["String"]
        return lambda text: text.replace(literal, content)
    if "Regex" in pattern:
        compiled = regex.compile(pattern["Regex"])
        return lambda text: compiled.sub(lambda _: content, text)
    raise UnsupportedError(path, f"Replace normalizer pattern {pattern!r} is neither String nor Regex")


def strip(spec: dict, path: str) -> Normalizer:
    left, right = spec.get("strip_left", True), spec.get("strip_right", True)

    def run(text: str) -> str:
        if left:
            text = _LEADING_SPACE.sub("", text)
        if right:
            text = _TRAILING_SPACE.sub("", text)
        return text

    return run


def sequence(spec: dict, path: str) -> Normalizer:
    return chain([build_normalizer(s, path) for s in spec.get("normalizers", [])])


BUILDERS = {"Lowercase": lowercase, "Prepend": prepend, "Replace": replace, "Strip": strip, "Sequence": sequence}


def build_normalizer(spec: dict | None, path: str) -> Normalizer | None:
    """The normalizer described by a tokenizer.json `normalizer` entry (None when absent)."""
    if spec is not None and spec.get("type") in ("NFC", "NFD", "NFKC", "NFKD"):
        return unicode_form(spec["type"])
    return build_component("normalizer", BUILDERS, spec, path)
