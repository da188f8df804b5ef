"""The BPE model: one pre-tokenized word -> token ids, by applying merges lowest rank first.

Merges are a dict `(left_id, right_id) -> (rank, merged_id)`. Short words (almost all of them) use
the textbook loop: find the adjacent pair with the lowest rank, merge every occurrence, repeat; a
word of n symbols costs O(n^2) dictionary look-ups, which is cheapest for n below a few dozen.
Longer words use a heap of candidate pairs over a doubly linked list of symbols, O(n log n), so a
1 MB run of one letter stays linear-ish. Both pick the same merge at every step (lowest rank,
leftmost first), which is what Hugging Face's `Word::merge_all` does. Words are cached, and a long
SentencePiece-style word (a line with "▁" for spaces) is merged piece by piece where the vocabulary proves no
merge crosses the cuts (merge_cuts.py).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from itertools import repeat

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.limits import MAX_MERGES, check_size
from reference_engine.tokenizer.models.merge_cuts import encode_word, merge_cuts
from reference_engine.tokenizer.models.pieces import SPACE

HEAP_THRESHOLD = 16  # symbols; above this the heap merge beats the loop (measured on byte-level words)
NO_MERGE = (1 << 62, -1)   # (rank, merged id) of a pair with no merge: above every rank


@dataclass
class BPE:
    vocab: dict[str, int]
    merges: dict[tuple[int, int], tuple[int, int]]
    unk_token: str | None = None
    byte_fallback: bool = False
    fuse_unk: bool = False
    ignore_merges: bool = False
    continuing_subword_prefix: str | None = None
    end_of_word_suffix: str | None = None
    id_to_token: dict[int, str] = field(default_factory=dict)
    cache: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self):
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.unk_id = self.vocab.get(self.unk_token) if self.unk_token is not None else None
        self.byte_ids = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
        self.all_bytes = self.byte_fallback and None not in self.byte_ids   # no character falls through to unk
        self.byte_fallbacks: dict[str, list[int]] = {}
        # ignore_merges looks the whole word up, and a prefix/suffix changes a symbol's text: no cutting then
        cuttable = not self.ignore_merges and not self.continuing_subword_prefix and not self.end_of_word_suffix
        self.cuts = merge_cuts(self.vocab, self.vocab.get(SPACE), self.unk_id, plain=self.vocab,
                               byte_fallback=self.all_bytes) if cuttable else None

    def encode_word(self, word: str) -> list[int]:
        """Token ids for one pre-tokenized word (cached)."""
        # ignore_merges is read here, not when the cuts were made: a check may flip it on a copy (gguf_pre.py)
        return encode_word(word, None if self.ignore_merges else self.cuts, self.cache, self.merge)

    def merge(self, word: str) -> list[int]:
        """Token ids for one word, merged now (not cached)."""
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols = self.initial_symbols(word)
        return merge_heap(symbols, self.merges) if len(symbols) > HEAP_THRESHOLD else merge_loop(symbols, self.merges)

    def char_bytes(self, char: str) -> list[int]:
        """The <0xNN> ids of a character outside the vocabulary (remembered: CJK text repeats them)."""
        ids = self.byte_fallbacks.get(char)
        if ids is None:
            if len(self.byte_fallbacks) >= 100_000:
                self.byte_fallbacks.clear()   # bounded memory on adversarial input
            ids = self.byte_fallbacks[char] = [self.byte_ids[b] for b in char.encode("utf-8")]
        return ids

    def initial_symbols(self, word: str) -> list[int]:
        """One id per character, or its <0xXX> byte tokens, or unk (fused if asked); unknown
        characters with no byte tokens and no unk token are dropped, as tokenizers does."""
        vocab = self.vocab
        if not self.continuing_subword_prefix and not self.end_of_word_suffix:   # "" is no affix either
            ids = list(map(vocab.get, word))
            if None not in ids:   # the common case, every character a token
                return ids
            if not self.byte_fallback and self.unk_id is None:
                return [i for i in ids if i is not None]
            if self.all_bytes:   # every unknown character becomes its bytes
                return [i for c, t in zip(word, ids) for i in ([t] if t is not None else self.char_bytes(c))]
        out: list[int] = []
        last = len(word) - 1
        pending_unk = False
        for i, char in enumerate(word):
            key = char
            if i > 0 and self.continuing_subword_prefix is not None:
                key = self.continuing_subword_prefix + key
            if i == last and self.end_of_word_suffix is not None:
                key = key + self.end_of_word_suffix
            token_id = vocab.get(key)
            if token_id is not None:
                if pending_unk:
                    out.append(self.unk_id)
                    pending_unk = False
                out.append(token_id)
                continue
            if self.byte_fallback:
                byte_ids = [self.byte_ids[b] for b in key.encode("utf-8")]
                if None not in byte_ids:
                    out.extend(byte_ids)
                    continue
            if self.unk_id is not None:
                if pending_unk and not self.fuse_unk:
                    out.append(self.unk_id)
                pending_unk = True
        if pending_unk:
            out.append(self.unk_id)
        return out


def merge_loop(ids: list[int], merges: dict) -> list[int]:
    """Repeatedly merge the leftmost occurrence of the lowest-ranked adjacent pair.

    One occurrence per step (not all of them, as GPT-2's encoder.py does) because a merge can
    create a pair of even lower rank in merge lists that are not rank-consistent (converted
    SentencePiece models), and Hugging Face picks by (rank, position) at every step. `pairs[i]` holds
    the (rank, merged id) of ids[i], ids[i + 1]: min() and list.index() (the first, so the leftmost) scan
    it in C, and a merge recomputes only the two pairs beside it.
    """
    get = merges.get
    ids = list(ids)
    pairs = list(map(get, zip(ids, ids[1:]), repeat(NO_MERGE)))
    n = len(pairs)
    while n:
        best = min(pairs)
        if best is NO_MERGE:
            break
        i = pairs.index(best)   # ranks are unique per pair, so equal entries are the same merge
        ids[i] = best[1]
        del ids[i + 1], pairs[i]   # cheaper than a slice assignment
        n -= 1
        if i:
            pairs[i - 1] = get((ids[i - 1], ids[i]), NO_MERGE)
        if i < n:
            pairs[i] = get((ids[i], ids[i + 1]), NO_MERGE)
    return ids


def merge_heap(ids: list[int], merges: dict) -> list[int]:
    """Same result as merge_loop in O(n log n): a heap of candidate merges over a linked list.

    Heap entries are single ints `rank << 32 | position` (cheap to compare; ties go to the leftmost
    position). An entry is stale when the pair now at its position has another rank.
    """
    n = len(ids)
    sym: list = list(ids)  # None marks a symbol merged into its left neighbour
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    get = merges.get
    heap = []
    for i in range(n - 1):
        hit = get((sym[i], sym[i + 1]))
        if hit is not None:
            heap.append(hit[0] << 32 | i)
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        key = pop(heap)
        i = key & 0xFFFFFFFF
        left = sym[i]
        if left is None:
            continue
        j = nxt[i]
        if j >= n:
            continue
        hit = get((left, sym[j]))
        if hit is None or hit[0] != key >> 32:
            continue  # stale: a neighbour changed since this entry was pushed
        sym[i] = merged = hit[1]
        sym[j] = None
        k = nxt[i] = nxt[j]
        if k < n:
            prv[k] = i
            hit = get((merged, sym[k]))
            if hit is not None:
                push(heap, hit[0] << 32 | i)
        p = prv[i]
        if p >= 0:
            hit = get((sym[p], merged))
            if hit is not None:
                push(heap, hit[0] << 32 | p)
    return [s for s in sym if s is not None]


def build_bpe(spec: dict, path: str) -> BPE:
    """The BPE model from a tokenizer.json `model` entry."""
    if spec.get("type", "BPE") != "BPE":
        raise UnsupportedError(path, f"model type {spec.get('type')!r} is not supported (only BPE)")
    if spec.get("dropout") not in (None, 0, 0.0):
        raise UnsupportedError(path, f"BPE dropout {spec['dropout']} makes encoding random; not supported")
    vocab = spec.get("vocab")
    if not isinstance(vocab, dict):
        raise ModelDirError(path, "model.vocab is missing or not an object")
    prefix = spec.get("continuing_subword_prefix")
    merges = parse_merges(spec.get("merges", []), vocab, prefix, path)
    return BPE(vocab=vocab, merges=merges, unk_token=spec.get("unk_token"),
               byte_fallback=bool(spec.get("byte_fallback", False)), fuse_unk=bool(spec.get("fuse_unk", False)),
               ignore_merges=bool(spec.get("ignore_merges", False)), continuing_subword_prefix=prefix,
               end_of_word_suffix=spec.get("end_of_word_suffix"))


def parse_merges(raw: list, vocab: dict, prefix: str | None, path: str) -> dict:
    """Merges in either form ("a b" or ["a", "b"]) -> {(id_a, id_b): (rank, id_ab)}."""
    if not isinstance(raw, list):
        raise ModelDirError(path, f"model.merges must be a list, found {type(raw).__name__}")
    check_size("number of model.merges", len(raw), MAX_MERGES, path, minimum=None)
    merges = {}
    for rank, merge in enumerate(raw):
        if isinstance(merge, str):
            parts = merge.split(" ")
            if len(parts) != 2:
                raise ModelDirError(path, f"merge #{rank} {merge!r} is not two space-separated tokens")
        elif isinstance(merge, list) and len(merge) == 2:
            parts = merge
        else:
            raise ModelDirError(path, f"merge #{rank} {merge!r} is neither 'a b' nor ['a', 'b']")
        left, right = parts
        if prefix and right.startswith(prefix):
            merged = left + right[len(prefix):]
        else:
            merged = left + right
        for token in (left, right, merged):
            if token not in vocab:
                raise ModelDirError(path, f"merge #{rank} {merge!r} uses {token!r}, which is not in the vocab")
        # a repeated pair keeps its last rank, as in tokenizers
        merges[(vocab[left], vocab[right])] = (rank, vocab[merged])
    return merges
