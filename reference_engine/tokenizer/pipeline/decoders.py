"""Decoders: token strings -> text (tokenizer.json `decoder`).

Each decoder maps a list of token strings to a list of strings, like tokenizers' `decode_chain`, so
that they compose in a Sequence; the final text is the concatenation.
"""
from __future__ import annotations

from typing import Callable

import regex

from reference_engine.tokenizer.pipeline.components import build_component, chain
from reference_engine.errors import UnsupportedError
from reference_engine.tokenizer.pipeline.pre_tokenizers import UNICODE_TO_BYTES, prepend_scheme

Decoder = Callable[[list[str]], list[str]]
_BYTE_TOKEN = regex.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def byte_level(spec: dict, path: str) -> Decoder:
    """Undo the GPT-2 byte alphabet; characters outside it stand for their own UTF-8 bytes."""
    def run(tokens: list[str]) -> list[str]:
        data = bytearray()
        for token in tokens:
            for char in token:
                byte = UNICODE_TO_BYTES.get(char)
                if byte is None:
                    data += char.encode("utf-8")
                else:
                    data.append(byte)
        return [data.decode("utf-8", errors="replace")]

    return run


def metaspace(spec: dict, path: str) -> Decoder:
    replacement = spec.get("replacement", "▁")
    strip_first = prepend_scheme(spec) != "never"

    def run(tokens: list[str]) -> list[str]:
        # tokenizers drops every meta space of the first token (not only a leading one) unless
        # prepend_scheme is "never"; reproduced as is, quirk included.
        return [token.replace(replacement, "" if i == 0 and strip_first else " ") for i, token in enumerate(tokens)]

    return run


def byte_fallback(spec: dict, path: str) -> Decoder:
    """Runs of <0xXX> tokens become the UTF-8 text they spell; an invalid run becomes one U+FFFD
    per byte, as tokenizers does."""
    def run(tokens: list[str]) -> list[str]:
        out, pending = [], bytearray()
        for token in tokens:
            m = _BYTE_TOKEN.match(token) if token.startswith("<0x") else None
            if m:
                pending.append(int(m.group(1), 16))
                continue
            if pending:
                out.append(_flush(pending))
                pending = bytearray()
            out.append(token)
        if pending:
            out.append(_flush(pending))
        return out

    return run


def _flush(pending: bytearray) -> str:
    try:
        return pending.decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd" * len(pending)


def fuse(spec: dict, path: str) -> Decoder:
    return lambda tokens: ["".join(tokens)]


def strip(spec: dict, path: str) -> Decoder:
    content, start, stop = spec.get("content", " "), spec.get("start", 0), spec.get("stop", 0)

    def strip_one(token: str) -> str:
        begin = 0
        while begin < min(start, len(token)) and token[begin] == content:
            begin += 1
        end = len(token)
        while end > begin and len(token) - end < stop and token[end - 1] == content:
            end -= 1
        return token[begin:end]

    return lambda tokens: [strip_one(t) for t in tokens]


def replace(spec: dict, path: str) -> Decoder:
    pattern, content = spec.get("pattern", {}), spec.get("content", "")
    if "String" in pattern:
        literal = pattern["String"]
        return lambda tokens: [t.replace(literal, content) for t in tokens]
    if "Regex" in pattern:
        compiled = regex.compile(pattern["Regex"])
        return lambda tokens: [compiled.sub(lambda _: content, t) for t in tokens]
    raise UnsupportedError(path, f"Replace decoder pattern {pattern!r} is neither String nor Regex")


def sequence(spec: dict, path: str) -> Decoder:
    return chain([build_decoder(s, path) for s in spec.get("decoders", [])])


BUILDERS = {"ByteLevel": byte_level, "Metaspace": metaspace, "ByteFallback": byte_fallback, "Fuse": fuse,
            "Strip": strip, "Replace": replace, "Sequence": sequence}


def build_decoder(spec: dict | None, path: str) -> Decoder | None:
    """The decoder described by a tokenizer.json `decoder` entry (None: tokens joined by spaces)."""
    return build_component("decoder", BUILDERS, spec, path)
