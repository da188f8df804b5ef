"""Cut a word where the vocabulary proves no merge can cross, so that its pieces merge (and cache) alone.

Why: SentencePiece-style tokenizers (Llama 2, Phi-3, Mistral, Gemma) have no pre-tokenizer that splits on
spaces: the normalizer turns " " into "▁", so a whole line (Gemma: the whole text) is one word for the merge
loop, which then never hits the word cache on text it has not seen. Cut into pieces that repeat ("▁the"),
most of a new text is cache hits, as with a pre-tokenizer.

Why the ids stay the same. A merge joins two adjacent symbols into a token whose text is theirs concatenated,
so a merge across the boundary between characters x and y produces a token containing "xy". If no token a
merge can produce contains "xy", no merge ever crosses that boundary. The merge loop takes, at every step, the
best candidate pair of the whole word (lowest rank, or highest score, then leftmost); the candidates on one side
of such a boundary depend only on that side's symbols, and ties by position keep their order on each side. So
each side receives exactly the merges the loop picks on it alone, in the same order, and the word's ids are the
pieces' ids concatenated. Where a run of unknown symbols becomes one unk id (fuse_unk, SentencePiece without
byte fallback), only known characters border a cut, so no run spans one.

What a symbol's text is. The score-based model (spm.py) keeps symbols as text. In the rank-based BPE model a
character outside the vocabulary starts as <0xNN> byte tokens, whose text starts with "<" and ends with ">", or
as unk; there only characters that are tokens (`plain`), and with complete byte fallback the others on their ">"
side, may border a cut.

Two levels, for speed: `split` cuts before every "▁" that does not follow a character some token has before a
"▁" (one C-level re.split per word; pieces like "▁the" that repeat), and `pieces` cuts a piece that missed the
cache at every other pair of characters no token contains (paid only on misses). The ids are cached per piece.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress
from operator import add, not_
from typing import Callable, Iterable

from reference_engine.tokenizer.models.pieces import SPACE

CUT_MIN_CHARS = 24   # shorter words go to the merge loop whole: one cache entry, no split call
PIECES_MIN_CHARS = 8   # a shorter miss merges whole: its merge costs about what looking for a cut would
BYTE_TOKEN_END = ">"  # the last character of every <0xNN> byte token
CACHE_MAX_CHARS = 256
CACHE_MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class MergeCuts:
    split: re.Pattern              # zero-width: before a "▁" no merge crosses
    inner: frozenset[str]          # every pair of adjacent characters inside a token a merge can produce
    plain: frozenset[str] | None   # characters whose symbol is their own known text (None: every character)
    piece_ends: frozenset[str] | None   # if not None, split() pieces must end with one of these, else rejoin

    def pieces(self, word: str) -> list[str]:
        """`word` cut at every pair of adjacent characters that no token contains."""
        plain = self.plain
        # positions i where word[i - 1:i + 1] is not in inner, iterated in C (the loop runs on every cache miss)
        cuts = list(compress(range(1, len(word)), map(not_, map(self.inner.__contains__, map(add, word, word[1:])))))
        if plain is not None:
            cuts = [i for i in cuts if word[i - 1] in plain and word[i] in plain]
        if not cuts:
            return [word]
        bounds = [0, *cuts, len(word)]
        return [word[a:b] for a, b in zip(bounds, bounds[1:])]


def merge_cuts(tokens: Iterable[str], space_id: int | None, unk_id: int | None,
               plain: Iterable[str] | None = None, byte_fallback: bool = False) -> MergeCuts | None:
    """The cuts of a vocabulary, or None when "▁" is not a known token (the pieces after a cut start with it).

    tokens: every token text a merge may produce; plain: the characters that are tokens themselves in a
    rank-based model (None for the score-based one, whose symbols are text); byte_fallback: every other
    character becomes <0xNN> tokens (all 256 present), rather than unk or nothing."""
    if space_id is None or space_id == unk_id:
        return None
    inner = frozenset(t[i - 1:i + 1] for t in tokens for i in range(1, len(t)))
    glued = {pair[0] for pair in inner if pair[1] == SPACE} | {SPACE}   # "x▁" inside a token: no cut after x
    plain = None if plain is None else frozenset(c for c in plain if len(c) == 1)
    # a character outside `plain` is byte tokens ("<0xNN>", ending in ">") or unk: the cut after it is safe only
    # with complete byte fallback and no ">▁" in a token, else split() cuts there and encode_word rejoins
    unsafe_fallback = plain is not None and not (byte_fallback and BYTE_TOKEN_END + SPACE not in inner)
    ends = "[^" + "".join(re.escape(c) for c in sorted(glued)) + "]"
    # the standard library's re, not regex: its split() on this lookbehind is 3-4x faster
    return MergeCuts(re.compile(f"(?<={ends})(?={SPACE})"), inner, plain, plain if unsafe_fallback else None)


def encode_word(word: str, cuts: MergeCuts | None, cache: dict[str, list[int]],
                merge: Callable[[str], list[int]]) -> list[int]:
    """The ids of one word by `merge` (a model's merge loop), through `cache` and, if there are any, `cuts`."""
    if cuts is None or len(word) <= CUT_MIN_CHARS:
        return encode_piece(word, cuts, cache, merge)
    out: list[int] = []
    get = cache.get
    chunks = cuts.split.split(word)
    if cuts.piece_ends is not None:
        chunks = rejoin(chunks, cuts.piece_ends)
    for chunk in chunks:
        ids = get(chunk)   # a hit costs a dict look-up, not a call
        out += ids if ids is not None else encode_piece(chunk, cuts, cache, merge)
    return out


def rejoin(chunks: list[str], piece_ends: frozenset[str]) -> list[str]:
    """Glue each chunk to the next unless it ends with one of `piece_ends` (cheaper than a lookbehind over a
    class of every such character: Gemma 3 has 200k of them)."""
    out = [chunks[0]]
    for chunk in chunks[1:]:
        if out[-1][-1] in piece_ends:
            out.append(chunk)
        else:
            out[-1] += chunk
    return out


def encode_piece(word: str, cuts: MergeCuts | None, cache: dict[str, list[int]],
                 merge: Callable[[str], list[int]]) -> list[int]:
    cached = cache.get(word)
    if cached is not None:
        return cached
    pieces = cuts.pieces(word) if cuts is not None and len(word) > PIECES_MIN_CHARS else None
    if pieces is None or len(pieces) == 1:
        return remember(cache, word, merge(word))
    ids: list[int] = []
    for piece in pieces:
        got = cache.get(piece)
        ids += got if got is not None else remember(cache, piece, merge(piece))
    return remember(cache, word, ids)


def remember(cache: dict[str, list[int]], word: str, ids: list[int]) -> list[int]:
    """Cache the ids of words shorter than CACHE_MAX_CHARS, in at most CACHE_MAX_ENTRIES entries."""
    if len(word) < CACHE_MAX_CHARS:
        if len(cache) >= CACHE_MAX_ENTRIES:
            cache.clear()  # bounded memory on adversarial input; a cold cache is only slower
        cache[word] = ids
    return ids
