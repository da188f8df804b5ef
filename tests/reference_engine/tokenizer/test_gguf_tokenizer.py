"""The tokenizer built from a GGUF's tokenizer.ggml.* metadata reproduces llama.cpp's vectors (the original
Hugging Face tokenizers' ids) for every BPE and SentencePiece vocabulary in the llama-cpp-python sdist."""
from __future__ import annotations

import pytest

from reference_engine.files.gguf_file import GGUFFile
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests import assets_gguf
from tests.conftest import _asset

pytestmark = pytest.mark.assets


@pytest.fixture(scope="module")
def vocab():
    cache = {}

    def get(name):
        if name not in cache:
            v = _asset(assets_gguf.llamacpp_vocab_gguf, name)
            cache[name] = (v, Tokenizer.from_pretrained(v.gguf))
        return cache[name]
    return get


@pytest.mark.parametrize("name", assets_gguf.GGUF_VOCABS)
def test_vectors_reproduced_from_the_gguf(vocab, name):
    vectors, tok = vocab(name)
    assert len(vectors.inputs) >= 46
    wrong = [text for text, ids in zip(vectors.inputs, vectors.expected_ids)
             if tok.encode(text, add_special_tokens=False) != ids]
    assert wrong == []


@pytest.mark.parametrize("name", assets_gguf.GGUF_VOCABS)
def test_decode_inverts_encode(vocab, name):
    vectors, tok = vocab(name)
    lossless = GGUFFile.open(vectors.gguf).get("tokenizer.ggml.model") == "gpt2"
    for text in vectors.inputs:
        decoded = tok.decode(tok.encode(text, add_special_tokens=False))
        if lossless:
            assert decoded == text
        else:  # SentencePiece: the space prefix goes and comes back; text with leading spaces loses one
            assert decoded == text or decoded == text[1:] or text.strip() == "" or "\ufffd" in decoded, text


def test_implicit_add_bos_follows_llama_cpp(vocab):
    """llama.cpp adds BOS for llama-bpe (pre = llama-bpe implies it) and SentencePiece vocabularies, not for GPT-2."""
    _, llama3 = vocab("llama-bpe")
    assert llama3.encode("Hello")[0] == 128000 and llama3.add_bos_token
    _, spm = vocab("llama-spm")
    assert spm.encode("Hello")[:1] == [1]
    _, gpt2 = vocab("gpt-2")
    assert gpt2.encode("Hello") == gpt2.encode("Hello", add_special_tokens=False)


def test_a_directory_holding_one_gguf_loads_and_two_are_refused(vocab, tmp_path):
    vectors, _ = vocab("gpt-2")
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "m.gguf").symlink_to(vectors.gguf)
    assert Tokenizer.from_pretrained(tmp_path / "one").encode("Hello world", add_special_tokens=False) == [15496, 995]
    (tmp_path / "one" / "n.gguf").symlink_to(vectors.gguf)
    from reference_engine.errors import ModelDirError
    with pytest.raises(ModelDirError, match="holds 2 GGUF files"):
        Tokenizer.from_pretrained(tmp_path / "one")


def test_special_tokens_split_out_and_skip_on_decode(vocab):
    _, qwen = vocab("qwen2")
    ids = qwen.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)
    assert ids[0] == 151644 and ids[-1] == 151645
    assert qwen.decode(ids, skip_special_tokens=True) == "user\nhi"


def test_spm_merges_by_score_not_rank(vocab):
    """A hand-made case where the score order and the id order disagree: llama.cpp takes the higher score."""
    from reference_engine.tokenizer.models.spm import SpmModel
    vocab_ = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4}
    high_bc = SpmModel(vocab_, scores=[0, 0, 0, -5.0, -1.0])
    high_ab = SpmModel(vocab_, scores=[0, 0, 0, -1.0, -5.0])
    assert high_bc.encode_word("abc") == [0, 4] and high_ab.encode_word("abc") == [3, 2]


def test_unknown_pre_tokenizer_is_refused(tmp_path):
    from tests.checks.zoo_gguf import write_variant
    from reference_engine.errors import UnsupportedError
    path = write_variant(tmp_path, "x.gguf", metadata={"tokenizer.ggml.pre": "no-such-pre"})
    with pytest.raises(UnsupportedError, match="no-such-pre"):
        Tokenizer.from_gguf(GGUFFile.open(path))
