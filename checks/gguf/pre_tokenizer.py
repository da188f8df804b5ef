"""Which `tokenizer.ggml.pre` a BPE vocabulary should carry, recomputed the way llama.cpp's converter picks it.

convert_hf_to_gguf.py encodes CHECK_TEXT with the Hugging Face tokenizer, hashes str(ids) and looks the hash
up in a table of known models (checks/gguf/pre_hashes.py). The GGUF has no Hugging Face tokenizer, but
it has the vocabulary and merges: encoding CHECK_TEXT with each pre-tokenizer llama.cpp implements and
finding a known hash identifies the model's real pre-tokenizer, when the model is in the table.
"""
from __future__ import annotations

import copy
import hashlib

from checks.gguf.pre_hashes import CHECK_TEXT, KNOWN_HASHES
from reference_engine.tokenizer.sources.gguf_pre import REGEXES
from reference_engine.tokenizer.pipeline.byte_level_plan import byte_level_plan
from reference_engine.tokenizer.pipeline.pre_tokenizers import build_pre_tokenizer

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def check_hash(ids: list[int]) -> str:
    return hashlib.sha256(str(ids).encode()).hexdigest()


def known_pre(tok) -> str | None:
    """The pre name llama.cpp's converter would have written for this tokenizer as it is, else None."""
    names = _lookup(tok)
    return names[0] if names else None


def recompute_pre(tok) -> list[str]:
    """The pre names whose regexes (with or without ignore_merges), applied to this vocabulary, give a hash the
    converter knows: usually one; two when fine-tunes share a vocabulary but differ in ignore_merges
    (llama-bpe / smaug-bpe). Empty when no pre-tokenizer llama.cpp implements makes it a known model."""
    found: list[str] = []
    for kind, regexes in REGEXES.items():
        for ignore_merges in (True, False):
            for name in _lookup(with_pre(tok, regexes, ignore_merges)):
                if name not in found:
                    found.append(name)
    return found


def _lookup(tok) -> list[str]:
    """The converter's name for this tokenizer's ids of CHECK_TEXT; the Hugging Face tokenizer it hashed may or
    may not have added BOS, whatever the GGUF's add_bos_token says, so both are tried."""
    try:
        ids = tok.encode(CHECK_TEXT, add_special_tokens=False)
    except Exception:  # a regex the `regex` module rejects: this candidate cannot be the model's
        return []
    bos = tok.bos_token_id
    variants = ([bos, *ids], ids) if bos is not None else (ids,)
    return [KNOWN_HASHES[h] for h in map(check_hash, variants) if h in KNOWN_HASHES]


def with_pre(tok, regexes: tuple[str, ...], ignore_merges: bool):
    """A copy of `tok` splitting with `regexes` (fresh caches; the original is untouched)."""
    spec = {"type": "Sequence", "pretokenizers": [
        *({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes),
        BYTE_LEVEL]}
    other = copy.copy(tok)
    other.pre_tokenizer = build_pre_tokenizer(spec, tok.path)
    other.byte_level_plan = byte_level_plan(spec)
    other.word_cache = {}
    other.model = copy.copy(tok.model)
    other.model.cache = {}
    other.model.ignore_merges = ignore_merges
    return other
