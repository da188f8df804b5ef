"""Cutting SentencePiece-style words where no merge can cross (merge_cuts.py) changes no id.

Real vocabularies: each tokenizer encodes long texts (runs of spaces, leading spaces, newlines, byte-fallback
characters, CJK, code, literal "▁") with its cuts and with the whole-word path, and both equal the oracle: Hugging
Face on the same tokenizer.json, transformers' conversion of phi-3's GGUF, sentencepiece on Mistral's model.
Adversarial vocabularies: random tokens (some with "x▁" inside, which forbids the cut after x) and random scores
or merge ranks, where the whole-word path is the oracle, and for the rank-based model Hugging Face too.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tokenizers import Tokenizer as HFTokenizer, models

from reference_engine.tokenizer.models.merge_cuts import merge_cuts
from reference_engine.tokenizer.models.spm import SpmModel
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests import assets_gguf
from tests.conftest import _asset
from tests.reference_engine.tokenizer.tokenizer_cases import CORPUS_LINES

CODE = "class A:\n    def f(self, x):\n        if x:\n            return  x  # two  spaces\n\t\tpass\n\n"
LONG_TEXTS = [
    " ".join(CORPUS_LINES) * 3,
    CODE * 40,
    "   leading spaces then words  with   runs of    spaces\n\n\n   and newlines  \n" * 20,
    "emoji 😀👍🏽 rare 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 controls \x00\x01\x7f and ▁literal▁ ▁▁meta spaces between words " * 10,
    "日本語のテキストと中文文本，还有한국어 텍스트。 汉字 漢字 かな カナ " * 30,
    "x" * 700 + " " * 300 + "word " * 50,
]


def _without_cuts(make):
    tok = make()
    tok.model.cuts = None
    return tok


def _same_ids_both_paths(make, oracle, texts):
    cut, whole = make(), _without_cuts(make)
    assert cut.model.cuts is not None   # the vocabulary allows cutting: the test exercises it
    for text in texts:
        expected = oracle(text)
        assert whole.encode(text, add_special_tokens=False) == expected, text[:60]
        assert cut.encode(text, add_special_tokens=False) == expected, text[:60]


@pytest.mark.assets
@pytest.mark.parametrize("name", ["llama-spm"])
def test_rank_based_cuts_match_hugging_face(llamacpp_tokenizer_dir, botchan_text, name):
    directory = llamacpp_tokenizer_dir(name)
    hf = HFTokenizer.from_file(str(directory / "tokenizer.json"))
    _same_ids_both_paths(lambda: Tokenizer.from_pretrained(directory),
                         lambda t: hf.encode(t, add_special_tokens=False).ids, LONG_TEXTS + [botchan_text[:30_000]])


@pytest.mark.assets
def test_gemma3_cuts_rejoin_after_byte_fallback_and_match_hugging_face(gemma3_270m_dir):
    """Gemma 3 has the token ">▁</": a cut after a byte-fallback character (text "<0xNN>") is unsafe there."""
    make = lambda: Tokenizer.from_pretrained(gemma3_270m_dir)  # noqa: E731
    assert make().model.cuts.piece_ends is not None
    hf = HFTokenizer.from_file(str(gemma3_270m_dir / "tokenizer.json"))
    _same_ids_both_paths(make, lambda t: hf.encode(t, add_special_tokens=False).ids,
                         LONG_TEXTS + ["<b> x</b> 😀 ▁</b> >▁</ " * 40])


@pytest.mark.assets
def test_score_based_cuts_match_transformers_conversion_of_phi3():
    vocab = _asset(assets_gguf.llamacpp_vocab_gguf, "phi-3")
    hf = HFTokenizer.from_file(str(_asset(assets_gguf.hf_tokenizer_of_vocab_gguf, "phi-3") / "tokenizer.json"))
    _same_ids_both_paths(lambda: Tokenizer.from_pretrained(vocab.gguf),
                         lambda t: hf.encode(t, add_special_tokens=False).ids, LONG_TEXTS + vocab.inputs)


@pytest.mark.assets
def test_sentencepiece_mode_cuts_match_sentencepiece(mistral_sentencepiece_models):
    import sentencepiece

    from reference_engine.tokenizer.sources.spm_tokenizer import tokenizer_from_sentencepiece

    path = mistral_sentencepiece_models["mistral_instruct_tokenizer_240323.model.v3"]
    reference = sentencepiece.SentencePieceProcessor(model_file=str(path))
    texts = [t.replace("\x00", "") for t in LONG_TEXTS]   # sentencepiece stops at NUL
    _same_ids_both_paths(lambda: tokenizer_from_sentencepiece(path, Tokenizer, {"add_bos_token": False}),
                         reference.encode, texts)


def test_a_token_with_a_glued_space_forbids_the_cut_after_that_character():
    cuts = merge_cuts(["▁", "a", "b", "a▁", "▁b"], space_id=0, unk_id=None)
    assert cuts.split.split("▁a▁b▁b▁a") == ["▁a▁b", "▁b", "▁a"]
    assert merge_cuts(["a", "b"], space_id=None, unk_id=None) is None      # "▁" is not a token
    assert merge_cuts(["▁", "a"], space_id=0, unk_id=0) is None            # "▁" is the unknown token


ALPHABET = "ab▁c"
TOKENS = st.text(alphabet=ALPHABET, min_size=2, max_size=4)
WORDS = st.text(alphabet=ALPHABET + "zé", min_size=25, max_size=90)   # "z", "é": in no vocabulary, byte fallback
# merges may join byte tokens too ("a" + "<0x7A>"): then a cut beside a byte-fallback character is not safe
MERGE_SIDES = st.one_of(st.text(alphabet=ALPHABET, min_size=1, max_size=3), st.sampled_from(["<0x7A>", "<0xC3>",
                                                                                           "<0xA9>", "a<0x7A>"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TOKENS, min_size=1, max_size=14, unique=True), st.randoms(use_true_random=False),
       st.sampled_from([None, True, False]), st.lists(WORDS, min_size=1, max_size=4))
def test_score_based_cuts_equal_the_whole_word_merge(tokens, rng, byte_fallback, words):
    pieces = ["<unk>", *ALPHABET, *[f"<0x{b:02X}>" for b in range(256)], *tokens]
    vocab = {p: i for i, p in enumerate(pieces)}
    scores = [rng.choice([-1.0, -2.0, -3.0, rng.uniform(-9, 0)]) for _ in pieces]   # ties on purpose

    def model():
        return SpmModel(vocab=dict(vocab), scores=scores, unk_id=0, byte_fallback=byte_fallback)

    cut, whole = model(), model()
    whole.cuts = None
    for word in words:
        assert cut.encode_word(word) == whole.encode_word(word), word


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(MERGE_SIDES, MERGE_SIDES), min_size=1, max_size=20, unique=True),
       st.booleans(), st.lists(WORDS, min_size=1, max_size=4))
def test_rank_based_cuts_equal_the_whole_word_merge_and_hugging_face(pairs, byte_fallback, words):
    vocab = {p: i for i, p in enumerate(["<unk>", *ALPHABET])}
    if byte_fallback:
        vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})
    merges = []
    for left, right in pairs:   # each merge joins two existing tokens into a new one
        if left in vocab and right in vocab and left + right not in vocab:
            vocab[left + right] = len(vocab)
            merges.append((left, right))
    hf = HFTokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=byte_fallback, fuse_unk=True))
    spec = json.loads(hf.to_str())
    cut, whole = Tokenizer.from_json(spec), Tokenizer.from_json(spec)
    whole.model.cuts = None
    for word in words:
        expected = hf.encode(word).ids
        assert whole.encode(word) == expected, word
        assert cut.encode(word) == expected, word
