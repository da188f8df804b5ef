"""Competence at distance: one long prompt that asks the copy test at several distances and reads a
natural passage at several positions, with the built-in text as filler between.

Layout of `distance_prompt(tokenizer, vocab_size, tokens)` (positions in ids):

    [BOS] f S_k f S_k-1 ... f S_0 | filler | S_0 | filler ... S_1 pad P_1 | filler ... S_k pad P_k
          firsts (k+1 random sequences of COPY_LENGTH ordinary tokens, disjoint, LEAD_TOKENS of filler f
          before each), largest distance first
    second copy of S_0 NEAR_DISTANCE after its first (the control); of S_j at 1/4, 1/2, 3/4 and the end of
    the room left after the firsts (so the largest distance is the prompt's length less ~130 tokens)
    P_j: a passage of the first applicable built-in part (prose_en where it applies), never in the filler,
    behind PAD_TOKENS filler tokens; `near` holds the same pad + passage pairs one after another from position
    ~0, the reference its far loss is compared with.

Filler: the other applicable built-in parts, cycled (the copy sequences are random word pieces, so the filler
never shows them; it may repeat itself, which no score reads). Scores come from the competence family's own
functions (scores.copy_score, scores.mean_loss): one copy score, one loss, wherever the log-probs come from.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Sequence

from probes.competence.copy_sequence import COPY_LENGTH, SEED, ordinary_tokens
from probes.competence.corpus import SEPARATOR, bos_prefix, builtin_parts, encode_part
from probes.competence.scores import CopyScore, copy_score, mean_loss

NEAR_DISTANCE = 2 * COPY_LENGTH       # the short control: a model that fails here fails CMP002, not at distance
FRACTIONS = (0.25, 0.5, 0.75, 1.0)    # of the tokens asked for: the far distances
PASSAGE_TOKENS = 48                   # a natural passage scored at each far position
PAD_TOKENS = 16                       # filler right before each passage (the same in the near reference)
MIN_GAP = 8                           # filler tokens at least between two placed pieces
LEAD_TOKENS = 16                      # filler before each first copy
TAIL = COPY_LENGTH + MIN_GAP + PAD_TOKENS + PASSAGE_TOKENS   # a far pair's second copy and its passage


@dataclass(frozen=True)
class Pair:
    """A copy pair: the same sequence at [first, first + length) and [second, second + length)."""
    first: int
    second: int
    length: int

    @property
    def distance(self) -> int:
        return self.second - self.first


@dataclass(frozen=True)
class Passage:
    """A passage at [start, end) of the long prompt and at [near_start, near_end) of the near prompt."""
    start: int
    end: int
    near_start: int
    near_end: int


@dataclass(frozen=True)
class DistancePrompt:
    ids: tuple[int, ...]            # the long prompt (len <= tokens asked for)
    pairs: tuple[Pair, ...]         # ascending distance; pairs[0] is the near control
    passages: tuple[Passage, ...]   # ascending position, one per far pair
    near: tuple[int, ...]           # [BOS] + (pad + passage) for each passage: the passages read near position 0


@dataclass(frozen=True)
class DistanceScore:
    """The prompt's scores from next-token log-probs of `ids` and of `near`."""
    copies: tuple[CopyScore, ...]   # per pair
    far_loss: tuple[float, ...]     # per passage: its mean loss where it stands in the long prompt
    near_loss: tuple[float, ...]    # the same passage's loss in the near prompt


def _filler(tokenizer, skip: str) -> list[int]:
    """The applicable built-in parts but `skip`, a blank line between, as one run of ids."""
    sep = [int(t) for t in tokenizer.encode(SEPARATOR, add_special_tokens=False)]
    out: list[int] = []
    for part in builtin_parts():
        if part.name == skip:
            continue
        ids, _, _ = _encoded(tokenizer, part)
        if ids:
            out += ids + sep
    return out


def _encoded(tokenizer, part):
    try:
        return encode_part(tokenizer, part)
    except Exception:               # a part the tokenizer cannot encode is left out (competence says why)
        return None, 0.0, "cannot be encoded"


def _passages(tokenizer) -> tuple[str, list[int]] | None:
    """(part name, its ids) of the first applicable built-in part long enough for passages."""
    for part in builtin_parts():
        ids, _, _ = _encoded(tokenizer, part)
        if ids and len(ids) >= 2 * PASSAGE_TOKENS:
            return part.name, ids
    return None


def pair_count(tokens: int) -> int:
    """Far pairs a prompt of `tokens` holds (FRACTIONS that leave a gap wider than a passage between pairs)."""
    per_pair = LEAD_TOKENS + COPY_LENGTH
    room = tokens - TAIL - MIN_GAP - (len(FRACTIONS) + 1) * per_pair
    return sum(1 for k in range(1, len(FRACTIONS) + 1) if room / k > TAIL + MIN_GAP)


class _Cycle:
    """Filler tokens handed out in order, cycling."""

    def __init__(self, ids: list[int]):
        self.ids, self.at = ids, 0

    def take(self, n: int) -> list[int]:
        out = []
        while len(out) < n:
            out.append(self.ids[self.at % len(self.ids)])
            self.at += 1
        return out


def distance_prompt(tokenizer, vocab_size: int, tokens: int, seed: int = SEED) -> DistancePrompt | None:
    """The long prompt for a model read up to `tokens` positions, or None when the tokenizer has too few ordinary
    word pieces or no applicable text, or `tokens` leaves no room for a far pair."""
    text = _passages(tokenizer)
    pool = ordinary_tokens(tokenizer, vocab_size)
    far = pair_count(tokens)
    if text is None or far < 1 or len(pool) < 2 * (far + 1) * COPY_LENGTH:
        return None
    filler = _filler(tokenizer, text[0]) or text[1]
    flat = random.Random(seed).sample(pool, (far + 1) * COPY_LENGTH)
    seqs = [flat[i * COPY_LENGTH:(i + 1) * COPY_LENGTH] for i in range(far + 1)]
    chunks = [text[1][i:i + PASSAGE_TOKENS] for i in range(0, len(text[1]) - PASSAGE_TOKENS + 1, PASSAGE_TOKENS)]
    fill = _Cycle(filler)
    ids = bos_prefix(tokenizer)
    firsts = {}
    for j in range(far, -1, -1):                 # largest distance first; each first copy in natural text
        ids = ids + fill.take(LEAD_TOKENS)
        firsts[j] = len(ids)
        ids = ids + seqs[j]
    # second copies: the near control right after the firsts, the far ones at FRACTIONS of the room left
    base, room = len(ids), tokens - TAIL - MIN_GAP
    fractions = FRACTIONS[len(FRACTIONS) - far:] if far < len(FRACTIONS) else FRACTIONS
    targets = [firsts[0] + NEAR_DISTANCE] + [base + int((room - base) * f) for f in fractions]
    pairs, passages, near = [], [], bos_prefix(tokenizer)
    for j, target in enumerate(targets):
        ids = ids + fill.take(max(target - len(ids), MIN_GAP)) + seqs[j]
        pairs.append(Pair(firsts[j], len(ids) - COPY_LENGTH, COPY_LENGTH))
        if j > 0:                                # a passage behind each far second copy
            pad, passage = fill.take(MIN_GAP + PAD_TOKENS), chunks[(j - 1) % len(chunks)]
            ids = ids + pad
            near = near + pad[-PAD_TOKENS:]
            passages.append(Passage(len(ids), len(ids) + len(passage), len(near), len(near) + len(passage)))
            ids, near = ids + passage, near + passage
    if len(ids) > tokens or any(not 0 <= t < vocab_size for t in ids):
        return None
    return DistancePrompt(tuple(ids), tuple(pairs), tuple(passages), tuple(near))


def span_loss(logprobs: Sequence[float], start: int, end: int) -> float:
    """Mean loss of tokens [start + 1, end) (logprobs[i] scores token i + 1; the first token has no context of its
    own passage)."""
    return mean_loss(logprobs[start:end - 1])


def distance_score(prompt: DistancePrompt, logprobs: Sequence[float], near_logprobs: Sequence[float]) -> DistanceScore:
    """Scores of every pair and passage from the next-token log-probs of prompt.ids and prompt.near."""
    copies = tuple(copy_score(logprobs, p.first, p.length, second=p.second) for p in prompt.pairs)
    far = tuple(span_loss(logprobs, s.start, s.end) for s in prompt.passages)
    near = tuple(span_loss(near_logprobs, s.near_start, s.near_end) for s in prompt.passages)
    return DistanceScore(copies, far, near)


def reach(steps: Iterable[tuple[int, bool]]) -> tuple[int, int | None]:
    """Over (distance, read there) by increasing distance: (the largest distance read before the first that is
    not, that first one or None). The one rule of how far a model or a server reads (CTX001, EPT121)."""
    reads = 0
    for distance, read in steps:
        if not read:
            return reads, distance
        reads = distance
    return reads, None
