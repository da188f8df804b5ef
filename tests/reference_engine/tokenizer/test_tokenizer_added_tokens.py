"""Added tokens: matched before the model (longest first), with special/lstrip/rstrip/normalized/single_word."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st
from tokenizers import AddedToken

from reference_engine.tokenizer.tokenizer import Tokenizer
from tests.reference_engine.tokenizer import tokenizer_cases as cases

ADDED = [
    AddedToken("<tag>", special=True, normalized=False),
    AddedToken("<tag>long", special=True, normalized=False),  # longest match must win over <tag>
    AddedToken("[L]", lstrip=True, special=True, normalized=False),
    AddedToken("[R]", rstrip=True, special=True, normalized=False),
    AddedToken("word", single_word=True, special=False, normalized=False),
    AddedToken("Hello World", special=False, normalized=True),  # matched after normalization
    AddedToken("ﬁne", special=False, normalized=True),
]
TEXTS = ["<tag>long<tag>x", "a  [L]  b", "a  [R]  b", "words word sword word_ word.", "Hello World!",
         "hello world", "ﬁne fine", "[L][R][L]", "<tag", "  [R]", "[L]  ", "x<|endoftext|>y<|im_start|>",
         "<|endoftext|><|endoftext|>", "a\x1c[L]\x1c[R]\x1cb", "a\u3000[L]\u00a0[R]\u2028b"]


def _pair(family: str, extra=ADDED):
    hf = cases.hf(family)
    hf.add_tokens(list(extra))
    return Tokenizer.from_json(hf.to_str(), config=cases.config(family)), hf


@pytest.mark.parametrize("family", ["gpt2", "qwen2", "spm", "spm_legacy"])
def test_added_token_matching_matches_hugging_face(family):
    ours, hf = _pair(family)
    for text in TEXTS:
        ids = hf.encode(text).ids
        assert ours.encode(text) == ids, text
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip), text


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["<tag>", "<tag>long", "[L]", "[R]", "word", " ", "  ", "x", "Hello World",
                                 "ﬁne", "\n", "<|endoftext|>", "é"]), max_size=12))
def test_added_tokens_on_random_mixtures(parts):
    text = "".join(parts)
    for family in ("gpt2", "spm_legacy"):
        ours, hf = _cached_pair(family)
        assert ours.encode(text) == hf.encode(text).ids, (family, text)


_PAIRS: dict = {}


def _cached_pair(family):
    if family not in _PAIRS:
        _PAIRS[family] = _pair(family)
    return _PAIRS[family]


def test_special_flag_controls_skip_special_tokens():
    ours, _ = _pair("gpt2")
    ids = ours.encode("<tag>word")
    assert ours.decode(ids, skip_special_tokens=True) == "word"
    assert ours.decode(ids) == "<tag>word"


def test_len_counts_added_tokens_once():
    ours, hf = _pair("gpt2")
    assert len(ours) == hf.get_vocab_size(with_added_tokens=True)
    assert ours.vocab_size == hf.get_vocab_size(with_added_tokens=False)
    spec = json.loads(cases.spec_json("gpt2"))
    assert len(Tokenizer.from_json(spec)) == len(spec["model"]["vocab"])  # specials already in the vocab
