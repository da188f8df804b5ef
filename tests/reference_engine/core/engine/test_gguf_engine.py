"""The engine on GGUF files: logits equal transformers' for the same GGUF (it dequantizes on load with
gguf_file=), within 1e-4 fp32, with the same greedy tokens; the tokenizer built from tokenizer.ggml.* gives
transformers' ids. Real files: SmolLM2-135M Q4_1, Gemma 3 270M Q4_K_M, and SmolLM2 converted to F32 and Q8_0
by llama.cpp's own convert_hf_to_gguf.py. Tiny factory models exported to F32 GGUF give bit-identical logits
to the same model's safetensors directory (name mapping and the Q/K un-permutation, for llama/qwen2/qwen3)."""
from __future__ import annotations

import pytest
import torch

from reference_engine.engine import Engine
from tests import assets, assets_gguf, oracle_cache
from tests.checks.zoo_gguf import F32, export_spec, write_spec
from tests.conftest import _asset
from tests.reference_engine.core.gguf_family_runs import ragged_batch_equals_alone

TEXTS = ["The capital of France is Paris. Once upon a time, in a land far away,",
         "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)  # 🦙 ünïcödé 12345"]
REAL = {
    "smollm2-q4_1": lambda: _asset(assets.smollm2_gguf),
    "gemma3-270m-q4_k_m": lambda: _asset(assets.gemma3_270m_gguf),
    "smollm2-f32-converted": lambda: _asset(assets_gguf.smollm2_converted_gguf, "f32"),
    "smollm2-q8_0-converted": lambda: _asset(assets_gguf.smollm2_converted_gguf, "q8_0"),
}


def transformers_on_gguf(path) -> dict:
    """transformers' own GGUF loader on `path`: its ids and float32 logits for each of TEXTS (tests/oracle_cache.py:
    asked once per file and transformers version)."""
    def ask():
        from transformers import AutoModelForCausalLM, AutoTokenizer
        hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
        hf_tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        out = {}
        for i, text in enumerate(TEXTS):
            out[f"ids{i}"] = hf_tok(text)["input_ids"]
            with torch.no_grad():
                out[f"logits{i}"] = hf(torch.tensor([out[f"ids{i}"]])).logits[0].float()
        return out
    return oracle_cache.answer("gguf-logits", [path], {"texts": TEXTS}, ask)


@pytest.mark.assets
@pytest.mark.parametrize("name", REAL, ids=list(REAL))
def test_logits_match_transformers_on_the_same_gguf(name):
    """The engine's GGUF reading against transformers' own GGUF loader on the real files (Gemma 3 270M Q4_K_M: 65 s
    in the idle suite when transformers is asked, dequantizing and running a 270M model in fp32 for every text)."""
    path = REAL[name]()
    engine = Engine.from_pretrained(path)
    oracle = transformers_on_gguf(path)
    for i, text in enumerate(TEXTS):
        ids = engine.tokenizer.encode(text)
        assert ids == oracle[f"ids{i}"], text
        ours, ref = engine.logits(ids), oracle[f"logits{i}"]
        diff = (ours - ref).abs().max().item()
        print(f"{name}: max |logit diff| {diff:.3g} over {len(ids)} tokens")
        assert diff <= 1e-4
        assert torch.equal(ours.argmax(-1), ref.argmax(-1))


@pytest.mark.parametrize("preset", ["llama", "qwen2", "qwen3"])
def test_f32_export_is_bit_identical_to_the_safetensors_model(preset, tmp_path):
    from reference_engine.testing.factory import build_model_dir
    hf_dir = tmp_path / "hf"
    build_model_dir(hf_dir, preset)
    path = write_spec(export_spec(preset, quant=F32), tmp_path / "model.gguf")
    ours, ref = Engine.from_pretrained(path), Engine.from_pretrained(hf_dir)
    ids = ref.tokenizer.encode(TEXTS[0])
    def plain(engine):
        return engine.tokenizer.encode(TEXTS[0], add_special_tokens=False)
    assert plain(ours) == plain(ref)
    assert torch.equal(ours.logits(ids), ref.logits(ids))
    assert ours.config.num_key_value_heads == ref.config.num_key_value_heads
    out = ours.generate([ids], max_new_tokens=5)[0]
    assert out.token_ids == ref.generate([ids], max_new_tokens=5)[0].token_ids
    ragged_batch_equals_alone(path, high=ref.config.vocab_size)       # an unequal-length batch from the GGUF


def test_engine_refuses_an_unsupported_architecture(tmp_path):
    from reference_engine.errors import UnsupportedError
    from tests.checks.zoo_gguf import write_variant
    spec_path = write_variant(tmp_path, "m.gguf")
    data = spec_path.read_bytes().replace(b"llama.block_count", b"lllma.block_count")
    length = b"\x05\x00\x00\x00\x00\x00\x00\x00"  # the uint64 length before a 5-byte string value
    (tmp_path / "x.gguf").write_bytes(data.replace(length + b"llama", length + b"lllma", 1))
    with pytest.raises(UnsupportedError, match="lllma"):
        Engine.from_pretrained(tmp_path / "x.gguf")
