"""llama.cpp's SentencePiece-style tokenizer (`tokenizer.ggml.model = "llama"`): a score-based merge, not a
rank-based one, so the BPE model cannot express it.

llm_tokenizer_spm_session (llama-vocab.cpp): split the word into characters; for every adjacent pair whose
concatenation is a vocabulary token, queue a bigram with that token's score; repeatedly take the best bigram
(highest score, then leftmost), skip it if either side changed since it was queued, merge, and queue the new
neighbours. Every final symbol is a token, or (a single character outside the vocabulary) its UTF-8 bytes as
<0xXX> tokens (byte fallback), else the unknown token.

SentencePiece's own BPE (bpe_model.cc, for a tokenizer.model read by sentencepiece_model.py) is the same merge
with three differences, switched on by `byte_fallback` not being None: only NORMAL, USER_DEFINED and UNUSED
pieces may be produced by a merge (`mergeable`); a final UNUSED piece is split back into the two symbols it was
merged from (`unused`, "resegment"); an unknown symbol becomes its <0xNN> bytes when byte_fallback is on, else
the unknown id, one per run of unknown symbols.

Words are cached, and a long word (a whole line with "▁" for spaces) is merged piece by piece where the vocabulary
proves that no merge crosses the cuts (merge_cuts.py).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from itertools import repeat
from operator import add

from reference_engine.tokenizer.models.merge_cuts import encode_word, merge_cuts
from reference_engine.tokenizer.models.pieces import SPACE

LOOP_MAX_CHARS = 64   # words up to this length merge in merge_by_score's loop (measured faster), longer in the heap
NO_PAIR = float("-inf")   # below every score merge_scores admits


@dataclass
class SpmModel:
    vocab: dict[str, int]                 # token text -> id (a repeated text keeps its last id, as llama.cpp does)
    scores: list[float]
    unk_id: int | None = None
    id_to_token: dict[int, str] = field(default_factory=dict)
    cache: dict[str, list[int]] = field(default_factory=dict)
    byte_fallback: bool | None = None     # None: llama.cpp's fallback; True/False: SentencePiece's
    mergeable: dict[str, int] | None = None   # pieces a merge may produce (None: the whole vocab)
    unused: frozenset[int] = frozenset()      # UNUSED piece ids, split back after merging
    frozen: dict[str, int] = field(default_factory=dict)   # USER_DEFINED pieces: one symbol, never merged

    def __post_init__(self):
        if not self.id_to_token:
            self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.byte_ids = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
        producible = self.vocab if self.mergeable is None else self.mergeable
        self.score_of = merge_scores(producible, self.scores) if not self.unused else None
        # UNUSED pieces are split back by a per-word table that a later merge overwrites (sentencepiece's
        # rev_merge), so the pieces of one word would interact through it: no cutting for such models. Runs of
        # unknown symbols become one unk in SentencePiece without byte fallback: only known characters border a cut.
        unk_runs = self.byte_fallback is False
        known = [t for t, i in self.vocab.items() if i != self.unk_id] if unk_runs else None
        self.cuts = None if self.unused else merge_cuts(producible, self.vocab.get(SPACE), self.unk_id, plain=known)

    def encode_word(self, text: str) -> list[int]:
        """Token ids of one word (cached). A word that is a frozen piece (sentencepiece's user-defined symbols,
        cut out of the text by the caller) is that piece, whatever the merges would make of its characters."""
        piece = self.frozen.get(text)
        if piece is not None:
            return [piece]
        return encode_word(text, self.cuts, self.cache, self.merge)

    def merge(self, text: str) -> list[int]:
        """Token ids of one word, merged now (not cached)."""
        if not text:
            return []
        if self.score_of is not None and len(text) <= LOOP_MAX_CHARS:
            symbols, split_back = merge_by_score(text, self.score_of), {}
        else:
            symbols, split_back = self._merge_heap(text)
        out: list[int] = []
        ids = list(map(self.vocab.get, symbols))
        # every symbol a known token and nothing to split back: no byte fallback, unk or resegmenting to do
        if None not in ids and (self.byte_fallback is None or (not split_back and self.unk_id not in ids)):
            return ids
        if self.byte_fallback is None:
            for piece in symbols:
                self._emit(piece, out)
            return out
        resegmented: list[str] = []
        for piece in symbols:
            self._resegment(piece, split_back, resegmented)
        return self._emit_sentencepiece(resegmented, out)

    def _merge_heap(self, text: str) -> tuple[list[str], dict[str, tuple[str, str]]]:
        """llama.cpp's bigram queue: the final symbols, and the split-back table of the UNUSED pieces merged."""
        n = len(text)
        start = list(range(n))            # symbol i covers text[start[i]:start[i] + size[i]]
        size = [1] * n
        nxt = list(range(1, n)) + [-1]
        prv = list(range(-1, n - 1))
        vocab, scores, unused = (self.vocab if self.mergeable is None else self.mergeable), self.scores, self.unused
        split_back: dict[str, tuple[str, str]] = {}   # UNUSED piece -> the two symbols it was merged from
        heap: list[tuple[float, int, int, int]] = []   # (-score, left, right, merged size)

        def add(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            a, b = start[left], start[left] + size[left] + size[right]
            token = vocab.get(text[a:b])
            if token is None or token >= len(scores):
                return
            if token in unused:
                split_back[text[a:b]] = (text[a:start[right]], text[start[right]:b])
            heapq.heappush(heap, (-scores[token], left, right, size[left] + size[right]))

        for i in range(1, n):
            add(i - 1, i)
        while heap:
            _, left, right, merged = heapq.heappop(heap)
            if size[left] == 0 or size[right] == 0 or size[left] + size[right] != merged:
                continue  # stale: one side was merged elsewhere since this bigram was queued
            size[left] = merged
            size[right] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            add(prv[left], left)
            add(left, nxt[left])
        symbols, i = [], 0
        while i != -1:
            symbols.append(text[start[i]:start[i] + size[i]])
            i = nxt[i]
        return symbols, split_back

    def _resegment(self, piece: str, split_back: dict, symbols: list[str]) -> None:
        pending = [piece]
        while pending:   # depth-first, left before right, without recursion
            piece = pending.pop()
            parts = split_back.get(piece) if self.vocab.get(piece) in self.unused else None
            if parts is None:
                symbols.append(piece)
            else:
                pending += [parts[1], parts[0]]

    def _emit_sentencepiece(self, symbols: list[str], out: list[int]) -> list[int]:
        previous_unknown = False
        for piece in symbols:
            token = self.vocab.get(piece)
            if token is not None and token != self.unk_id:
                out.append(token)
                previous_unknown = False
            elif self.byte_fallback:
                out += [self.unk_id if b is None else b for b in (self.byte_ids[c] for c in piece.encode("utf-8"))]
            elif not previous_unknown and self.unk_id is not None:
                out.append(self.unk_id)   # one unknown id for a run of unknown symbols
                previous_unknown = True
        return [i for i in out if i is not None]

    def _emit(self, piece: str, out: list[int]) -> None:
        token = self.vocab.get(piece)
        if token is not None:
            out.append(token)
            return
        for b in piece.encode("utf-8"):
            byte_id = self.byte_ids[b]
            if byte_id is None:
                byte_id = self.vocab.get(chr(b)) if b < 128 else None
            if byte_id is None:
                byte_id = self.unk_id
            if byte_id is not None:
                out.append(byte_id)


def merge_scores(producible: dict[str, int], scores: list[float]) -> dict[str, float] | None:
    """token text -> score, for the pieces a merge may produce; None when a score is not finite (-inf would
    tie with NO_PAIR, NaN has no order), which leaves every word to the heap merge."""
    out = {t: scores[i] for t, i in producible.items() if 0 <= i < len(scores)}
    return out if all(s > NO_PAIR and s < float("inf") for s in out.values()) else None


def merge_by_score(text: str, score_of: dict[str, float]) -> list[str]:
    """The symbols the heap merge ends with, for a short word: every step merges the adjacent pair of the highest
    score, leftmost first, as the heap pops it. max() and list.index() (the first, so the leftmost) scan the
    pair scores in C, where the heap pays a Python closure per queued bigram: faster below a few hundred symbols."""
    symbols = list(text)
    get = score_of.get
    pair = list(map(get, map(add, text, text[1:]), repeat(NO_PAIR)))   # pair[i]: symbols[i] + symbols[i + 1]
    n = len(pair)
    while n:
        best = max(pair)
        if best == NO_PAIR:
            break
        i = pair.index(best)
        symbols[i] += symbols.pop(i + 1)   # cheaper than a slice assignment
        del pair[i]
        n -= 1
        if i:
            pair[i - 1] = get(symbols[i - 1] + symbols[i], NO_PAIR)
        if i < n:
            pair[i] = get(symbols[i] + symbols[i + 1], NO_PAIR)
    return symbols
