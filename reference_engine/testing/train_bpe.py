"""Train a byte-level BPE tokenizer and return it as Hugging Face `tokenizer.json` content.

The algorithm is the classic one (Sennrich et al., GPT-2): split text into pre-tokens with a regex,
write each pre-token as bytes, count adjacent pairs over all pre-tokens weighted by frequency and
repeatedly merge the most frequent pair. Pair counts are updated incrementally (only the words that
contain the merged pair are touched) and the best pair comes from a lazy max-heap, so a merge costs
time proportional to the words it changes, not to the whole corpus.

The result uses the layout of Llama-3 / Qwen2 tokenizer.json files: a `Split` pre-tokenizer with the
regex followed by `ByteLevel(use_regex=False)`, a ByteLevel decoder, and the special tokens as added
tokens placed after the base vocabulary.
"""
from __future__ import annotations

import heapq
import unicodedata
from collections import Counter, defaultdict

import regex

from reference_engine.tokenizer.pipeline.pre_tokenizers import BYTES_TO_UNICODE

# The pre-tokenizer regexes of the three byte-level families we model.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def train_bpe(
    texts,
    vocab_size: int,
    special_tokens=(),
    pattern: str = GPT2_PATTERN,
    *,
    ignore_merges: bool = False,
    normalizer: str | None = None,
    bos_token: str | None = None,
) -> dict:
    """Learn `vocab_size - len(special_tokens)` base tokens (256 bytes + merges) from `texts`.

    `special_tokens` become added tokens with ids after the base vocabulary. `normalizer` may be a
    unicode form ("NFC", "NFKC", ...) applied before pre-tokenization (Qwen2 uses NFC); `bos_token`,
    when given (it must be one of `special_tokens`), is prepended by a TemplateProcessing
    post-processor as Llama-3 does. The returned dict is ready for `json.dumps`.
    """
    special_tokens = list(dict.fromkeys(special_tokens))
    base_size = vocab_size - len(special_tokens)
    if base_size < 256:
        raise ValueError(f"vocab_size {vocab_size} leaves {base_size} base tokens; need at least 256 bytes")
    if bos_token is not None and bos_token not in special_tokens:
        raise ValueError(f"bos_token {bos_token!r} is not one of special_tokens")
    word_counts = _count_words(texts, pattern, special_tokens, normalizer)
    tokens = [BYTES_TO_UNICODE[b] for b in range(256)]
    merges = _learn_merges(word_counts, tokens, base_size)
    vocab = {tok: i for i, tok in enumerate(tokens)}
    added = [_added_token(len(tokens) + i, tok) for i, tok in enumerate(special_tokens)]
    return _tokenizer_json(vocab, merges, added, pattern, ignore_merges, normalizer, bos_token)


def _count_words(texts, pattern: str, special_tokens: list[str], normalizer: str | None) -> Counter:
    """Frequency of every pre-token, as a tuple of byte ids; special tokens never take part."""
    word_re = regex.compile(pattern)
    special_re = regex.compile("|".join(regex.escape(t) for t in sorted(special_tokens, key=len, reverse=True)))
    counts: Counter = Counter()
    for text in texts:
        segments = special_re.split(text) if special_tokens else [text]
        for segment in segments:
            if normalizer:
                segment = unicodedata.normalize(normalizer, segment)
            counts.update(word_re.findall(segment))
    return Counter({tuple(word.encode("utf-8")): n for word, n in counts.items()})


def _learn_merges(word_counts: Counter, tokens: list[str], base_size: int) -> list[tuple[str, str]]:
    """Merge the most frequent adjacent pair until the vocabulary has `base_size` tokens.

    Ties break towards the pair whose merged string sorts first, which makes training deterministic.
    `tokens` is extended in place with the merged tokens.
    """
    words = [list(w) for w in word_counts]
    freqs = list(word_counts.values())
    pair_counts: defaultdict = defaultdict(int)
    where: defaultdict = defaultdict(set)  # pair -> indices of words containing it
    for wi, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += freqs[wi]
            where[pair].add(wi)
    heap = [(-n, tokens[a] + tokens[b], a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)
    merges = []
    ids = {tok: i for i, tok in enumerate(tokens)}
    while len(tokens) < base_size and heap:
        neg, _, a, b = heapq.heappop(heap)
        if pair_counts.get((a, b), 0) != -neg or -neg <= 0:
            continue  # stale heap entry: the count changed since it was pushed
        merged = tokens[a] + tokens[b]
        if merged not in ids:  # "ab"+"c" and "a"+"bc" both give "abc": one token, two merges
            ids[merged] = len(tokens)
            tokens.append(merged)
        new_id = ids[merged]
        merges.append((tokens[a], tokens[b]))
        changed = _apply_merge(words, freqs, (a, b), new_id, pair_counts, where)
        for pair in changed:
            if pair_counts.get(pair, 0) > 0:
                heapq.heappush(heap, (-pair_counts[pair], tokens[pair[0]] + tokens[pair[1]], *pair))
    return merges


def _apply_merge(words, freqs, pair, new_id, pair_counts, where) -> set:
    """Replace `pair` by `new_id` in every word containing it; return the pairs whose count changed."""
    changed = set()
    a, b = pair
    for wi in list(where.pop(pair, ())):
        word, freq = words[wi], freqs[wi]
        for old in zip(word, word[1:]):
            pair_counts[old] -= freq
            changed.add(old)
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                merged.append(new_id)
                i += 2
            else:
                merged.append(word[i])
                i += 1
        words[wi] = merged
        for new in zip(merged, merged[1:]):
            pair_counts[new] += freq
            where[new].add(wi)
            changed.add(new)
    pair_counts.pop(pair, None)
    changed.discard(pair)
    return changed


def _added_token(token_id: int, content: str) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def _tokenizer_json(vocab, merges, added, pattern, ignore_merges, normalizer, bos_token) -> dict:
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    post = {"type": "ByteLevel", **byte_level}
    if bos_token is not None:
        bos_id = next(t["id"] for t in added if t["content"] == bos_token)
        spec = {"id": bos_token, "ids": [bos_id], "tokens": [bos_token]}
        post = {"type": "Sequence", "processors": [post, {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos_token, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos_token, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos_token, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos_token: spec},
        }]}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": normalizer} if normalizer else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", **byte_level},
        ]},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": ignore_merges, "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges],
        },
    }
