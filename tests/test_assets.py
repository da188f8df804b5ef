"""The fetched real assets are what the rest of the suite believes they are (transformers as the oracle)."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from tests import assets

pytestmark = pytest.mark.assets


def test_smollm2_dir_is_a_complete_hf_directory(smollm2_dir):
    names = {p.name for p in smollm2_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= names
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
            config["num_key_value_heads"], config["vocab_size"]) == (30, 576, 9, 3, 49152)
    assert config["tie_word_embeddings"] is True and "quantization_config" not in config
    assert "<|im_start|>" in json.loads((smollm2_dir / "tokenizer_config.json").read_text())["chat_template"]


def test_smollm2_answers_the_known_reference_with_transformers(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert answer.strip() == "The capital of France is Paris."


@pytest.mark.parametrize("name", assets.LLAMACPP_VOCABS)
def test_llamacpp_vocab_vectors_pair_up(llamacpp_vocab, name):
    vocab = llamacpp_vocab(name)
    assert vocab.gguf.stat().st_size > 100_000
    assert len(vocab.inputs) == len(vocab.expected_ids) > 30
    assert any(ids for ids in vocab.expected_ids) and "" in vocab.inputs


@pytest.mark.parametrize("name", assets.LLAMACPP_VOCABS)
def test_converted_llamacpp_tokenizer_reproduces_the_original_ids(llamacpp_vocab, llamacpp_tokenizer_dir, name):
    """The converted directories (with the original layout restored) are trustworthy oracles."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(llamacpp_tokenizer_dir(name) / "tokenizer.json"))
    vocab = llamacpp_vocab(name)
    got = [tok.encode(s, add_special_tokens=False).ids for s in vocab.inputs]
    assert got == vocab.expected_ids


def test_mistral_sentencepiece_models_load_in_sentencepiece(mistral_sentencepiece_models):
    import sentencepiece as spm

    assert len(mistral_sentencepiece_models) == len(assets.MISTRAL_MODELS)
    for path in mistral_sentencepiece_models.values():
        sp = spm.SentencePieceProcessor(model_file=str(path))
        assert sp.get_piece_size() >= 32000
        assert sp.decode(sp.encode("Hello world")) == "Hello world"


def test_botchan_is_the_english_novel(botchan_text):
    assert len(botchan_text) > 200_000 and "Botchan" in botchan_text[:5000]


def test_fetch_failure_names_the_package_and_the_registry_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMDOCTOR_CACHE", str(tmp_path))
    with pytest.raises(assets.AssetError, match=r"could not fetch no-such-package-llmdoctor==0\.0\.1 from the "
                                                r"package registry"):
        assets.pip_download("no-such-package-llmdoctor==0.0.1", tmp_path, sdist=False)


def _build_counting(root: str, counter: str) -> str:
    import os
    from tests import assets as a

    os.environ["LLMDOCTOR_CACHE"] = root

    def build(tmp: Path) -> None:
        with open(counter, "a") as f:
            f.write("x")
        (tmp / "payload").write_text("data")

    return str(a.cached_dir("entry", build))


def test_concurrent_processes_build_a_cache_entry_once(tmp_path):
    counter = tmp_path / "builds"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        paths = pool.starmap(_build_counting, [(str(tmp_path / "cache"), str(counter))] * 3)
    assert len(set(paths)) == 1 and (Path(paths[0]) / "payload").read_text() == "data"
    assert counter.read_text() == "x"
    assert sorted(p.name for p in Path(paths[0]).iterdir()) == ["payload"]  # no marker inside the entry


def test_interrupted_build_leaves_no_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMDOCTOR_CACHE", str(tmp_path))

    def failing(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise assets.AssetError("boom")

    with pytest.raises(assets.AssetError):
        assets.cached_dir("entry", failing)
    assert not (tmp_path / "entry").exists()
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []
