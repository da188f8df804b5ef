"""train_bpe: its tokenizer.json loads in Hugging Face `tokenizers` and tokenizes identically to ours."""
from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer as HFTokenizer

from reference_engine.tokenizer.tokenizer import Tokenizer
from reference_engine.testing.train_bpe import GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN, train_bpe
from tests.reference_engine.tokenizer.tokenizer_cases import CORPUS, CORPUS_LINES

PROBES = CORPUS_LINES + ["", " ", "<|endoftext|>hello<|endoftext|>", "unseen wørds ☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "a" * 500]


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN], ids=["gpt2", "llama3", "qwen2"])
@pytest.mark.parametrize("ignore_merges", [False, True])
def test_trained_tokenizer_matches_hugging_face(pattern, ignore_merges):
    spec = train_bpe(CORPUS, 700, ["<|endoftext|>"], pattern, ignore_merges=ignore_merges)
    ours, hf = Tokenizer.from_json(spec), HFTokenizer.from_str(json.dumps(spec))
    for text in PROBES:
        ids = hf.encode(text).ids
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=False) == text


def test_vocabulary_layout():
    spec = train_bpe(CORPUS, 600, ["<s>", "</s>"])
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    assert len(vocab) == 598 and sorted(vocab.values()) == list(range(598))  # dense base ids
    assert [t["id"] for t in spec["added_tokens"]] == [598, 599]  # specials after the base vocab
    assert all(t["special"] and not t["normalized"] for t in spec["added_tokens"])
    assert len(merges) >= 598 - 256  # one merge per learned token (more when two merges share a result)
    tok = Tokenizer.from_json(spec, {"bos_token": "<s>"})
    assert len(tok) == 600 and tok.vocab_size == 598 and tok.bos_token_id == 598


def test_most_frequent_pair_is_merged_first():
    spec = train_bpe(["ab ab ab ab cd"], 257, [])
    assert spec["model"]["merges"] == ["a b"]


def test_training_is_deterministic_and_specials_never_merge():
    first = train_bpe(CORPUS + ["<|im_end|>" * 50], 650, ["<|im_end|>"])
    assert first == train_bpe(CORPUS + ["<|im_end|>" * 50], 650, ["<|im_end|>"])
    assert not any("im_end" in token for token in first["model"]["vocab"])


def test_bos_template_and_nfc_normalizer():
    spec = train_bpe(CORPUS, 600, ["<|bos|>"], QWEN2_PATTERN, normalizer="NFC", bos_token="<|bos|>")
    ours, hf = Tokenizer.from_json(spec, {"bos_token": "<|bos|>"}), HFTokenizer.from_str(json.dumps(spec))
    decomposed = "Cafe\u0301 nai\u0308ve"
    assert ours.encode(decomposed) == hf.encode(decomposed).ids
    assert ours.encode(decomposed)[0] == ours.bos_token_id and ours.add_bos_token
    assert ours.encode(decomposed) == ours.encode("Café naïve")


def test_too_small_vocab_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 256"):
        train_bpe(CORPUS, 200, [])
    with pytest.raises(ValueError, match="bos_token"):
        train_bpe(CORPUS, 300, [], bos_token="<s>")
