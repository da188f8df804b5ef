"""SentencePiece's normalizer and its user-defined-piece matcher, as sentencepiece runs them (normalizer.cc,
bpe_model.cc), so that a tokenizer.model alone encodes id for id as `sentencepiece` does.

Normalize (Normalizer::Normalize): walk the text unit by unit, where a unit is, in this order of preference, the
longest user-defined piece starting there (copied as is: the map never rewrites one), the longest source string
of the precompiled character map (replaced), or one character (copied). With remove_extra_whitespaces, units that
normalize to " " are dropped at the start, spaces after a unit ending in a space are dropped, and trailing meta
spaces are cut at the end (the dummy prefix too, and a literal "▁" the text ends with). Every " " becomes "▁"
(escape_whitespaces) and one "▁" goes in front (add_dummy_prefix), once for the whole text.

Split (bpe_model.cc's symbol split): in the normalized text the longest user-defined piece at each position is one
frozen symbol that no merge touches; a piece containing "▁" matches there too. The stretches between them are
merged alone.

Work is done on the text's UTF-8 bytes written as a latin-1 string (one character per byte): the map's source
strings are bytes, and slicing, comparing and regex search stay in C. A stretch holding nothing the map or the
user-defined pieces start with is copied whole.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from reference_engine.tokenizer.models.pieces import SPACE
from reference_engine.tokenizer.pipeline.added_tokens import longest_match_pattern
from reference_engine.tokenizer.sources.precompiled_charsmap import CharsMap

SPACE_BYTES = SPACE.encode("utf-8").decode("latin-1")
EXTRA_SPACES = re.compile(" {2,}")
REPLACEMENT_CHAR = "\ufffd".encode("utf-8").decode("latin-1")   # what a byte that starts no character becomes


@dataclass(frozen=True)
class Settings:
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool
    escape_whitespaces: bool


class SpmNormalizer:
    """`normalize(text, dummy_prefix)` and `split(normalized)` of one tokenizer.model."""

    def __init__(self, settings: Settings, charsmap: CharsMap | None, user_defined: list[str]):
        self.settings = settings
        self.charsmap = charsmap
        self.split_pattern = re.compile(longest_match_pattern(user_defined)) if user_defined else None
        raw_pieces = [p.encode("utf-8").decode("latin-1") for p in user_defined]
        self.raw_pattern = re.compile(longest_match_pattern(raw_pieces)) if raw_pieces else None
        # where the unit loop must look: a user-defined piece, or a place the map may match (CharsMap.starts).
        # Elsewhere text is copied whole.
        look = [self.raw_pattern.pattern] if self.raw_pattern is not None else []
        starts = charsmap.starts() if charsmap is not None else ""
        self.look = re.compile("|".join(look + [starts] if starts else look)) if look or starts else None
        # without a map, and with no piece holding a space, the loop reduces to string operations
        self.plain = charsmap is None and (not settings.remove_extra_whitespaces
                                           or not any(" " in p for p in user_defined))

    def normalize(self, text: str, dummy_prefix: bool | None = None) -> str:
        """The normalized text ("▁" for spaces); `dummy_prefix` overrides the model's add_dummy_prefix."""
        if not text:
            return ""
        prefix = self.settings.add_dummy_prefix if dummy_prefix is None else dummy_prefix
        if self.plain:
            return self._plain(text, prefix)
        raw = text.encode("utf-8").decode("latin-1")
        out = self._units(raw)
        if out is None:
            return ""
        space = SPACE_BYTES if self.settings.escape_whitespaces else " "
        if self.settings.escape_whitespaces:
            out = out.replace(" ", SPACE_BYTES)
        if prefix:
            out = space + out
        if self.settings.remove_extra_whitespaces:
            while out.endswith(space):
                out = out[:-len(space)]
        return out.encode("latin-1").decode("utf-8")

    def split(self, normalized: str) -> list[str]:
        """The normalized text cut into user-defined pieces and the stretches between them, in order."""
        if self.split_pattern is None:
            return [normalized] if normalized else []
        out, at = [], 0
        for m in self.split_pattern.finditer(normalized):
            if m.start() > at:
                out.append(normalized[at:m.start()])
            out.append(m.group())
            at = m.end()
        if at < len(normalized):
            out.append(normalized[at:])
        return out

    def _plain(self, text: str, prefix: bool) -> str:
        """No map, and no user-defined piece holding a space: the unit loop as string operations."""
        settings = self.settings
        if settings.remove_extra_whitespaces:
            text = EXTRA_SPACES.sub(" ", text.lstrip(" "))
            if not text:
                return ""
        space = SPACE if settings.escape_whitespaces else " "
        if settings.escape_whitespaces:
            text = text.replace(" ", SPACE)
        text = space + text if prefix else text
        return text.rstrip(space) if settings.remove_extra_whitespaces else text

    def _units(self, raw: str) -> str | None:
        """Normalizer::Normalize's loop over `raw` (UTF-8 bytes as latin-1), before spaces are escaped; None when
        nothing is left after leading spaces."""
        remove = self.settings.remove_extra_whitespaces
        pos, end = 0, len(raw)
        if remove:
            while pos < end:
                unit, used = self._unit(raw, pos)
                if unit != " ":
                    break
                pos += used
            if pos >= end:
                return None
        out: list[str] = []
        previous_space = remove
        look = self.look.search if self.look is not None else None
        while pos < end:
            if not 0x80 <= ord(raw[pos]) < 0xC0:   # a character starts here: copy up to the next place to look
                m = look(raw, pos) if look is not None else None
                stop = m.start() if m else end
                if stop > pos:
                    run = raw[pos:stop]   # characters that are units of their own, spaces among them
                    if remove:
                        run = EXTRA_SPACES.sub(" ", run.lstrip(" ") if previous_space else run)
                        previous_space = run.endswith(" ") if run else previous_space
                    out.append(run)
                    pos = stop
                    continue
            unit, used = self._unit(raw, pos)
            while previous_space and unit.startswith(" "):
                unit = unit[1:]
            if unit:
                out.append(unit)
                previous_space = unit.endswith(" ")
            pos += used
            if not remove:
                previous_space = False
        return "".join(out)

    def _unit(self, raw: str, pos: int) -> tuple[str, int]:
        """Normalizer::NormalizePrefix: (the unit's normalized bytes, bytes it consumes) at raw[pos:]."""
        if self.raw_pattern is not None:
            m = self.raw_pattern.match(raw, pos)
            if m:
                return m.group(), m.end() - pos
        if self.charsmap is not None:
            length, replacement = self.charsmap.longest(raw, pos)
            if length:
                return replacement, length
        byte = ord(raw[pos])
        if 0x80 <= byte < 0xC0:   # only after a map entry that ended inside a character
            return REPLACEMENT_CHAR, 1
        size = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
        return raw[pos:pos + size], size

