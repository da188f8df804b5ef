"""Pre-tokenizers: cut normalized text into the pieces ("words") that BPE then encodes one by one.

Each pre-tokenizer is a function `list[Piece] -> list[Piece]` built from its tokenizer.json spec.
A `Piece` is a string plus whether it begins at offset 0 of the original text, because Metaspace's
`prepend_scheme: "first"` only adds the meta space to the very first piece of the input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import regex

from reference_engine.tokenizer.pipeline.components import build_component, chain
from reference_engine.errors import UnsupportedError


def _bytes_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable character map (bytes that print keep their own char)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shift = [""] * 256, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


BYTES_TO_UNICODE: list[str] = _bytes_to_unicode()
UNICODE_TO_BYTES: dict[str, int] = {c: b for b, c in enumerate(BYTES_TO_UNICODE)}
# str.translate table: latin-1 decoded byte string -> byte-level characters, the fast path for encoding.
BYTE_LEVEL_TRANSLATION = {b: c for b, c in enumerate(BYTES_TO_UNICODE)}

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


@dataclass(slots=True)
class Piece:
    text: str
    at_origin: bool  # begins at offset 0 of the original input


PreTokenizer = Callable[[list[Piece]], list[Piece]]


def to_byte_level(text: str) -> str:
    """UTF-8 bytes of `text` written with the GPT-2 byte alphabet."""
    return text.encode("utf-8").decode("latin-1").translate(BYTE_LEVEL_TRANSLATION)


def compile_pattern(spec: dict, path: str) -> regex.Pattern:
    """tokenizer.json pattern: {"String": literal} or {"Regex": oniguruma regex}."""
    if "String" in spec:
        return regex.compile(regex.escape(spec["String"]))
    if "Regex" in spec:
        try:
            return regex.compile(spec["Regex"])
        except regex.error as e:
            raise UnsupportedError(path, f"pre-tokenizer regex {spec['Regex']!r} does not compile: {e}") from None
    raise UnsupportedError(path, f"pattern {spec!r} is neither String nor Regex")


def spans(pattern: regex.Pattern, text: str, invert: bool) -> list[tuple[int, int, bool]]:
    """Cover `text` with (start, end, is_match) spans, as tokenizers' `find_matches` does."""
    out, prev = [], 0
    for m in pattern.finditer(text):
        start, end = m.span()
        if start == end:
            continue  # an empty match splits nothing
        if prev != start:
            out.append((prev, start, invert))
        out.append((start, end, not invert))
        prev = end
    if prev != len(text):
        out.append((prev, len(text), invert))
    return out


def split_by_behavior(text: str, cover: list[tuple[int, int, bool]], behavior: str) -> list[tuple[int, int]]:
    """Turn match spans into piece spans following tokenizers' SplitDelimiterBehavior."""
    if behavior == "Isolated":
        return [(s, e) for s, e, _ in cover]
    if behavior == "Removed":
        return [(s, e) for s, e, is_match in cover if not is_match]
    out: list[list[int]] = []
    prev_match = False
    if behavior == "MergedWithPrevious":
        for s, e, is_match in cover:
            if is_match and out and not prev_match:
                out[-1][1] = e
            else:
                out.append([s, e])
            prev_match = is_match
    elif behavior == "MergedWithNext":
        pending = None
        for s, e, is_match in cover:
            if is_match:
                if pending is not None:
                    out.append([pending, s])
                pending = s
            else:
                out.append([pending if pending is not None else s, e])
                pending = None
        if pending is not None:
            out.append([pending, len(text)])
    elif behavior == "Contiguous":
        for s, e, is_match in cover:
            if out and is_match == prev_match:  # runs of matches (or, inverted, of non-matches) fuse
                out[-1][1] = e
            else:
                out.append([s, e])
            prev_match = is_match
    return [(s, e) for s, e in out]


def split_pieces(pieces: list[Piece], pattern: regex.Pattern, behavior: str, invert: bool) -> list[Piece]:
    out = []
    for piece in pieces:
        text = piece.text
        if behavior == "Isolated" and not invert:
            out.extend(_isolated_fast(piece, pattern))
            continue
        for s, e in split_by_behavior(text, spans(pattern, text, invert), behavior):
            if s < e:
                out.append(Piece(text[s:e], piece.at_origin and s == 0))
    return out


def _isolated_fast(piece: Piece, pattern: regex.Pattern) -> list[Piece]:
    """Isolated split without building spans: matches and the gaps between them, in order."""
    text, out, prev = piece.text, [], 0
    for m in pattern.finditer(text):
        start, end = m.span()
        if start == end:
            continue
        if prev != start:
            out.append(Piece(text[prev:start], piece.at_origin and prev == 0))
        out.append(Piece(text[start:end], piece.at_origin and start == 0))
        prev = end
    if prev != len(text):
        out.append(Piece(text[prev:], piece.at_origin and prev == 0))
    return out


def byte_level(spec: dict, path: str) -> PreTokenizer:
    add_prefix_space = spec.get("add_prefix_space", True)
    use_regex = spec.get("use_regex", True)
    gpt2 = regex.compile(GPT2_REGEX)

    def run(pieces: list[Piece]) -> list[Piece]:
        if add_prefix_space:
            pieces = [Piece(" " + p.text, p.at_origin) if p.text and p.text[0] != " " else p for p in pieces]
        if use_regex:
            pieces = split_pieces(pieces, gpt2, "Isolated", False)
        return [Piece(to_byte_level(p.text), p.at_origin) for p in pieces]

    return run


def metaspace(spec: dict, path: str) -> PreTokenizer:
    replacement = spec.get("replacement", "▁")
    scheme = prepend_scheme(spec)
    split = spec.get("split", True)
    on_replacement = regex.compile(regex.escape(replacement))

    def run(pieces: list[Piece]) -> list[Piece]:
        out = []
        for p in pieces:
            text = p.text.replace(" ", replacement)
            wants_prefix = scheme == "always" or (scheme == "first" and p.at_origin)
            if wants_prefix and text and not text.startswith(replacement):
                text = replacement + text
            out.append(Piece(text, p.at_origin))
        return split_pieces(out, on_replacement, "MergedWithNext", False) if split else out

    return run


def prepend_scheme(spec: dict) -> str:
    """Metaspace's prepend_scheme, reading the older boolean `add_prefix_space` form too."""
    if "prepend_scheme" in spec:
        return spec["prepend_scheme"]
    return "always" if spec.get("add_prefix_space", True) else "never"


def split(spec: dict, path: str) -> PreTokenizer:
    pattern = compile_pattern(spec.get("pattern", {}), path)
    behavior = spec.get("behavior", "Isolated")
    if behavior not in BEHAVIORS:
        raise UnsupportedError(path, f"Split behavior {behavior!r} is not supported")
    invert = bool(spec.get("invert", False))
    return lambda pieces: split_pieces(pieces, pattern, behavior, invert)


def digits(spec: dict, path: str) -> PreTokenizer:
    behavior = "Isolated" if spec.get("individual_digits", False) else "Contiguous"
    # Rust char::is_numeric: any of the Unicode categories Nd, Nl, No
    digit = regex.compile(r"\p{N}" if behavior == "Isolated" else r"\p{N}+")
    return lambda pieces: split_pieces(pieces, digit, "Isolated", False)


def whitespace_split(spec: dict, path: str) -> PreTokenizer:
    space = regex.compile(r"\s+")
    return lambda pieces: split_pieces(pieces, space, "Removed", False)


def whitespace(spec: dict, path: str) -> PreTokenizer:
    word = regex.compile(r"\w+|[^\w\s]+")
    return lambda pieces: split_pieces(pieces, word, "Removed", True)


def sequence(spec: dict, path: str) -> PreTokenizer:
    return chain([build_pre_tokenizer(s, path) for s in spec.get("pretokenizers", [])])


BUILDERS = {"ByteLevel": byte_level, "Metaspace": metaspace, "Split": split, "Digits": digits,
            "WhitespaceSplit": whitespace_split, "Whitespace": whitespace, "Sequence": sequence}


def build_pre_tokenizer(spec: dict | None, path: str) -> PreTokenizer | None:
    """The pre-tokenizer described by a tokenizer.json `pre_tokenizer` entry (None when absent)."""
    run = build_component("pre_tokenizer", BUILDERS, spec, path)
    if run is None:
        return None
    return lambda pieces: [p for p in run(pieces) if p.text]  # tokenizers drops empty pieces
