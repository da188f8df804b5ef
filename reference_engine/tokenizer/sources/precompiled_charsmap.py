"""SentencePiece's precompiled character map (NormalizerSpec.precompiled_charsmap), read by hand with every offset
checked.

What sentencepiece's trainer writes for a normalization rule such as nmt_nfkc (normalizer.cc,
EncodePrecompiledCharsMap): a little-endian uint32 `trie_size`, then `trie_size` bytes of a darts-clone double-array
trie over the UTF-8 source strings, then the replacement strings, each ended by a NUL. The trie's value for a
source string is the offset of its replacement. Normalizing walks the trie from each position and takes the longest
source string that matches (Normalizer::NormalizePrefix).

A double-array unit is a uint32: bit 31 marks a value unit (its low 31 bits are the value), bit 8 says the node
has a value (held by the unit at `position ^ offset`), bits 10.. hold the offset to the node's children (shifted
by 8 more when bit 9 is set) and the low byte is the label, the byte that leads to the node. From a node at
`position`, the child for byte c is the unit at `position ^ offset ^ c` when that unit's label is c.

Checked when the map is read, so that walking it later needs no check at all: the trie is a whole number of
256-unit blocks (darts-clone's layout; a child index differs from its block base in the low 8 bits only), every
node's children lie inside the array, the root is a node, and every value a node can reach points at a NUL-ended,
UTF-8 replacement inside the blob. Any failure is one ModelDirError naming tokenizer.model.
"""
from __future__ import annotations

import re
import struct
import sys
from array import array
from dataclasses import dataclass

from reference_engine.errors import ModelDirError

BLOCK_UNITS = 256
VALUE_BIT = 1 << 31
HAS_VALUE_BIT = 1 << 8
LABEL_MASK = VALUE_BIT | 0xFF


def unit_offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


@dataclass(frozen=True)
class CharsMap:
    """A parsed precompiled_charsmap. Text is walked as a latin-1 string of UTF-8 bytes (one character per byte),
    and replacements are kept in that form, so the caller can slice, compare and join bytes as str."""
    units: array
    replacements: dict[int, str]   # value (offset in the blob's string part) -> replacement, latin-1 form
    one_byte: frozenset[int]       # bytes that are a source string by themselves
    followers: dict[int, frozenset[int]]   # first byte -> the second bytes of longer source strings

    def starts(self) -> str:
        """A regex (over the latin-1 form) matching where a source string may start: a one-byte source, or a
        first byte followed by a second one some longer source has. Text between two such places is copied."""
        by_set: dict[frozenset[int], list[int]] = {}
        for first, second in self.followers.items():
            if not 0x80 <= first < 0xC0:   # a continuation byte never starts a character: no walk begins there
                by_set.setdefault(second, []).append(first)
        one_byte = [b for b in self.one_byte if not 0x80 <= b < 0xC0]
        branches = [_char_class(one_byte)] if one_byte else []
        branches += [_char_class(firsts) + _char_class(second) for second, firsts in by_set.items()]
        return "|".join(branches)

    def longest(self, raw: str, pos: int) -> tuple[int, str]:
        """(length in bytes, replacement) of the longest source string at raw[pos:], or (0, "")."""
        units, end = self.units, len(raw)
        node = unit_offset(units[0])
        length, value = 0, -1
        i = pos
        while i < end:
            c = ord(raw[i])
            node ^= c
            unit = units[node]
            if unit & LABEL_MASK != c:
                break
            node ^= unit_offset(unit)
            i += 1
            if unit & HAS_VALUE_BIT:
                length, value = i - pos, units[node] & (VALUE_BIT - 1)
        return (length, self.replacements[value]) if length else (0, "")


def read_charsmap(blob: bytes, path: str) -> CharsMap:
    """Parse and check a precompiled_charsmap; ModelDirError (naming `path`) if anything is out of bounds."""
    def corrupt(problem: str) -> ModelDirError:
        return ModelDirError(path, f"normalizer_spec.precompiled_charsmap: {problem} (corrupt map)")

    if len(blob) <= 4:
        raise corrupt(f"{len(blob)} bytes, shorter than its own header")
    trie_size = struct.unpack_from("<I", blob)[0]
    if trie_size >= len(blob) - 4:
        raise corrupt(f"the trie declares {trie_size} bytes but only {len(blob) - 4} follow the header, "
                      "with room for no replacement string")
    if trie_size == 0 or trie_size % (4 * BLOCK_UNITS):
        raise corrupt(f"a trie of {trie_size} bytes is not a whole number of {BLOCK_UNITS}-unit blocks")
    units = array("I")
    units.frombytes(blob[4:4 + trie_size])
    if sys.byteorder == "big":
        units.byteswap()
    strings = blob[4 + trie_size:]
    values = _check_nodes(units, corrupt)
    replacements = {v: _replacement(strings, v, corrupt) for v in values}
    return CharsMap(units, replacements, *_first_two_bytes(units))


def _first_two_bytes(units: array) -> tuple[frozenset[int], dict[int, frozenset[int]]]:
    root = unit_offset(units[0])
    one_byte, followers = set(), {}
    for first in range(256):
        unit = units[root ^ first]
        if unit & LABEL_MASK != first:
            continue
        if unit & HAS_VALUE_BIT:
            one_byte.add(first)
        base = root ^ first ^ unit_offset(unit)
        second = frozenset(c for c in range(256) if units[base ^ c] & LABEL_MASK == c)
        if second:
            followers[first] = second
    return frozenset(one_byte), followers


def _char_class(values) -> str:
    return "[" + "".join(re.escape(chr(v)) for v in sorted(values)) + "]"


def _check_nodes(units: array, corrupt) -> set[int]:
    """Every node's children inside the array; returns the values nodes hold."""
    n = len(units)
    if units[0] & VALUE_BIT:
        raise corrupt("the root unit is a value, not a node")
    values = set()
    for position, unit in enumerate(units):
        if unit & VALUE_BIT:
            continue
        base = position ^ unit_offset(unit)
        if base >= n:
            raise corrupt(f"unit {position} points at unit {base}, past the {n} units of the trie")
        if unit & HAS_VALUE_BIT:
            values.add(units[base] & (VALUE_BIT - 1))
    return values


def _replacement(strings: bytes, value: int, corrupt) -> str:
    end = strings.find(b"\0", value) if value < len(strings) else -1
    if end < 0:
        raise corrupt(f"a value points at byte {value} of the {len(strings)}-byte string table, where no "
                      "NUL-ended string is")
    text = strings[value:end]
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        raise corrupt(f"the replacement at byte {value} is not UTF-8") from None
    return text.decode("latin-1")
