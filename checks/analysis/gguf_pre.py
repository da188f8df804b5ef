"""Which `tokenizer.ggml.pre` a BPE vocabulary should carry, recomputed the way llama.cpp's converter picks it.

convert_hf_to_gguf.py encodes CHECK_TEXT with the Hugging Face tokenizer, hashes str(ids) and looks the hash
up in a table of known models (checks/analysis/gguf_pre_hashes.py). The GGUF has no Hugging Face tokenizer, but
it has the vocabulary and merges: encoding CHECK_TEXT with each pre-tokenizer llama.cpp implements and
finding a known hash identifies the model's real pre-tokenizer, when the model is in the table.
"""
from __future__ import annotations

import copy
import hashlib

from checks.analysis.gguf_pre_hashes import CHECK_TEXT, KNOWN_HASHES
from reference_engine.tokenizer.gguf_pre import REGEXES
from reference_engine.tokenizer.pre_tokenizers import build_pre_tokenizer, byte_level_plan

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def check_hash(ids: list[int]) -> str:
    return hashlib.sha256(str(ids).encode()).hexdigest()


def known_pre(tok) -> str | None:
    """The pre name llama.cpp's converter would have written for this tokenizer as it is, else None."""
    return _lookup(tok)


def recompute_pre(tok) -> str | None:
    """The pre name whose regexes, applied to this vocabulary, give a hash the converter knows; None when no
    pre-tokenizer llama.cpp implements makes this vocabulary a known model."""
    for kind, regexes in REGEXES.items():
        for ignore_merges in (False, True):
            found = _lookup(with_pre(tok, regexes, ignore_merges))
            if found is not None:
                return found
    return None


def _lookup(tok) -> str | None:
    for add_special in (True, False):   # the Hugging Face tokenizer's encode() may or may not add BOS
        try:
            name = KNOWN_HASHES.get(check_hash(tok.encode(CHECK_TEXT, add_special_tokens=add_special)))
        except Exception:  # a regex the `regex` module rejects: this candidate cannot be the model's
            return None
        if name is not None:
            return name
    return None


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
