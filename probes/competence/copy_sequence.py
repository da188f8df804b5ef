"""The copy test's input: a random sequence of ordinary tokens shown twice. Any trained decoder predicts the
second copy from the first (induction heads form early in training, whatever the language), so its loss on the
second copy collapses; a model whose weights are scrambled cannot. No language is needed, so this also covers
models trained on text the built-in corpus does not hold."""
from __future__ import annotations

import random
from dataclasses import dataclass

import regex

COPY_LENGTH = 32          # tokens per copy: 62 scored positions; induction shows within a few
SEED = 20260334           # fixed: every run, every engine and every server see the same sequence
# a word piece that starts a word: GPT-2 byte-level "Ġword", SentencePiece "▁word", then 3+ letters of any script
ORDINARY = regex.compile(r"^[\u0120\u2581 ][\p{L}]{3,}$")


@dataclass(frozen=True)
class CopyPrompt:
    """prefix (BOS when the tokenizer adds one) + sequence + the same sequence again."""
    ids: tuple[int, ...]      # what the model reads
    start: int                # index of the first copy's first token in ids
    length: int               # tokens per copy
    text: str                 # the sequence decoded (one copy), for an API that takes text
    round_trips: bool         # encode(text + text) gives the two copies back (an API fed text sees these ids)


def ordinary_tokens(tokenizer, vocab_size: int) -> list[int]:
    """Ids of word-start pieces of 3+ letters that are not special tokens, the more frequent half (BPE and
    SentencePiece vocabularies list frequent pieces first: rare ones may be undertrained glitch tokens)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    limit = min(int(vocab_size), len(tokenizer))
    pool = []
    for i in range(limit):
        piece = tokenizer.id_to_token(i) if hasattr(tokenizer, "id_to_token") else \
            tokenizer.convert_ids_to_tokens(i)
        if i not in special and isinstance(piece, str) and ORDINARY.match(piece):
            pool.append(i)
    return pool[:max(len(pool) // 2, min(len(pool), 4 * COPY_LENGTH))]


def copy_prompt(tokenizer, vocab_size: int, length: int = COPY_LENGTH, seed: int = SEED) -> CopyPrompt | None:
    """The copy test's prompt for this tokenizer, or None when its vocabulary has too few ordinary pieces."""
    pool = ordinary_tokens(tokenizer, vocab_size)
    if len(pool) < 2 * length:
        return None
    seq = random.Random(seed).sample(pool, length)
    bos = getattr(tokenizer, "bos_token_id", None)
    prefix = [int(bos)] if getattr(tokenizer, "add_bos_token", False) and bos is not None else []
    text = tokenizer.decode(seq)
    try:
        trips = list(tokenizer.encode(text + text, add_special_tokens=False)) == seq + seq
    except Exception:
        trips = False
    return CopyPrompt(tuple(prefix + seq + seq), len(prefix), length, text, trips)
