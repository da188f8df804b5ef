"""The BPE model on its own: merge order, unknown characters, byte fallback, prefixes, merge formats."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st
from tokenizers import Tokenizer as HFTokenizer, models

from reference_engine.tokenizer.models.bpe import build_bpe, merge_heap, merge_loop
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.tokenizer.tokenizer import Tokenizer


@st.composite
def merge_tables(draw):
    """Random symbol strings and a random (possibly rank-inconsistent) merge table over them."""
    n_symbols = draw(st.integers(2, 6))
    pairs = draw(st.lists(st.tuples(st.integers(0, n_symbols + 5), st.integers(0, n_symbols + 5)),
                          unique=True, max_size=25))
    merges = {pair: (rank, 100 + rank % (n_symbols + 3)) for rank, pair in enumerate(draw(st.permutations(pairs)))}
    word = draw(st.lists(st.integers(0, n_symbols + 5), max_size=120))
    return word, merges


@settings(max_examples=300, deadline=None)
@given(merge_tables())
def test_heap_merge_equals_quadratic_merge(case):
    word, merges = case
    assert merge_heap(word, merges) == merge_loop(word, merges)


def _via_hf(model) -> tuple[Tokenizer, HFTokenizer]:
    hf = HFTokenizer(model)
    return Tokenizer.from_json(hf.to_str()), hf


def _vocab(*tokens):
    return {t: i for i, t in enumerate(tokens)}


WORDS = ["abc", "abx", "xxa", "axxxb", "", "ab", "cab", "zz", "a\u00e9b", "日本"]


@pytest.mark.parametrize("fuse_unk", [False, True])
def test_unknown_characters_and_fused_unk_match_hugging_face(fuse_unk):
    vocab = _vocab("<unk>", "a", "b", "c", "ab", "abc")
    ours, hf = _via_hf(models.BPE(vocab, [("a", "b"), ("ab", "c")], unk_token="<unk>", fuse_unk=fuse_unk))
    for word in WORDS:
        assert ours.encode(word) == hf.encode(word).ids, word


def test_unknown_characters_are_dropped_without_unk_token():
    ours, hf = _via_hf(models.BPE(_vocab("a", "b", "ab"), [("a", "b")]))
    assert ours.encode("xabx") == hf.encode("xabx").ids == [2]


def test_byte_fallback_matches_hugging_face():
    vocab = _vocab("<unk>", "a", "b", *[f"<0x{b:02X}>" for b in range(256)], "ab")
    ours, hf = _via_hf(models.BPE(vocab, [("a", "b")], unk_token="<unk>", byte_fallback=True))
    for word in WORDS + ["😀", "\x00", "ab\u00e9ab"]:
        assert ours.encode(word) == hf.encode(word).ids, word


def test_continuing_subword_prefix_and_end_of_word_suffix():
    vocab = _vocab("<unk>", "a", "##b", "##c", "ab", "abc", "c</w>", "##c</w>", "ab##c</w>", "abc</w>")
    model = models.BPE(vocab, [("a", "##b"), ("ab", "##c")], unk_token="<unk>", continuing_subword_prefix="##")
    ours, hf = _via_hf(model)
    for word in ["ab", "abc", "abcc", "ca", "b"]:
        assert ours.encode(word) == hf.encode(word).ids, word
    suffix_vocab = _vocab("<unk>", "a", "b", "b</w>", "ab</w>", "a</w>")
    ours, hf = _via_hf(models.BPE(suffix_vocab, [("a", "b</w>")], unk_token="<unk>", end_of_word_suffix="</w>"))
    for word in ["ab", "a", "ba", "abb"]:
        assert ours.encode(word) == hf.encode(word).ids, word


def test_ignore_merges_takes_whole_word_from_vocab():
    # "abc" is in the vocab but no merge sequence reaches it: only ignore_merges yields it.
    vocab = _vocab("a", "b", "c", "bc", "abc")
    for ignore in (False, True):
        ours, hf = _via_hf(models.BPE(vocab, [("b", "c")], ignore_merges=ignore))
        assert ours.encode("abc") == hf.encode("abc").ids == ([4] if ignore else [0, 3])


def _spec(merges, vocab=None, **model):
    return {"model": {"type": "BPE", "vocab": vocab or _vocab("a", "b", "ab"), "merges": merges, **model}}


def test_both_merge_formats_load_identically():
    assert Tokenizer.from_json(_spec(["a b"])).encode("ab") == Tokenizer.from_json(_spec([["a", "b"]])).encode("ab")


@pytest.mark.parametrize("merges, message", [
    (["a b c"], "not two space-separated"),
    (["a q"], "'q', which is not in the vocab"),
    ([42], "neither"),
])
def test_bad_merges_are_one_line_errors(merges, message):
    with pytest.raises(ModelDirError, match=message):
        build_bpe(_spec(merges)["model"], "tokenizer.json")


@pytest.mark.parametrize("model, named", [
    ({"type": "WordPiece", "vocab": {}}, "WordPiece"),
    ({"type": "Unigram", "vocab": []}, "Unigram"),
    ({"type": "BPE", "vocab": {}, "merges": [], "dropout": 0.1}, "dropout"),
])
def test_unsupported_models_name_the_feature(model, named):
    with pytest.raises(UnsupportedError, match=named):
        Tokenizer.from_json({"model": model})


def test_repeated_merge_keeps_last_rank_like_tokenizers():
    vocab = _vocab("a", "b", "c", "ab", "bc")
    merges = ["b c", "a b", "b c"]  # (b, c) listed twice: tokenizers keeps the later rank
    ours = Tokenizer.from_json(_spec(merges, vocab))
    hf = HFTokenizer.from_str(json.dumps({**_spec(merges, vocab), "version": "1.0", "added_tokens": []}))
    assert ours.encode("abc") == hf.encode("abc").ids
