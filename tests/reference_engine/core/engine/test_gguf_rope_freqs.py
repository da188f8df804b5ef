"""Llama-3.1-style rope scaling from a GGUF: llama.cpp's converter writes it as the rope_freqs.weight tensor
(head_dim/2 divisors of the rotary frequencies) and no rope.scaling metadata. The engine divides its inverse
frequencies by them (core/rope.py freq_factors, filled in by files/gguf_config.py), so a tiny transformers Llama
with rope_scaling llama3, converted by llama.cpp's own convert_hf_to_gguf.py, gives transformers' logits."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from reference_engine.config import parse_config
from reference_engine.core.rope import build_rope_table, inverse_frequencies
from reference_engine.engine import Engine
from reference_engine.errors import ModelDirError
from reference_engine.files.gguf_config import load_gguf_config
from reference_engine.files.gguf_file import GGUFFile
from tests import assets, assets_gguf
from tests.conftest import _asset
from tests.hf_models import build_hf_model, hf_logits, load_hf_model

# head_dim 16, theta 10000: wavelengths 6.3, 20, 63, 199, ... -> one kept, two blended, five divided by 8
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
TEXT = ("The old lighthouse stood at the end of the long stone pier, and every evening the keeper climbed its "
        "narrow stairs to light the lamp. Ships that passed in the night saw the beam sweep across the water and "
        "knew that the harbour was near. 12 in January, 31 in February, 47 in March and 105 by the summer.")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(HF directory, its GGUF by convert_hf_to_gguf.py --outtype f32). SmolLM2's tokenizer files ride along:
    the converter needs a tokenizer whose pre-tokenizer hash it knows."""
    root = tmp_path_factory.mktemp("rope_freqs")
    tok_dir = _asset(assets.smollm2_dir)
    vocab = json.loads((tok_dir / "config.json").read_text())["vocab_size"]
    hf_dir = build_hf_model(root / "hf", "llama_rope_llama3", seed=3, vocab_size=vocab, hidden_size=64,
                            num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0, rope_scaling=LLAMA3)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / name, hf_dir / name)
    gguf = _asset(assets_gguf.convert_hf_dir, hf_dir, root / "llama31.gguf", "f32")
    return hf_dir, gguf


@pytest.mark.assets
def test_converter_writes_rope_freqs_and_no_scaling_metadata(converted):
    _, path = converted
    gguf = GGUFFile.open(path)
    assert "rope_freqs.weight" in gguf.tensors and gguf.tensors["rope_freqs.weight"].numel == 8
    assert gguf.get("llama.rope.scaling.type") is None
    factors = load_gguf_config(path).rope_scaling["freq_factors"]
    assert factors[0] == 1.0 and factors[-1] == 8.0 and 1.0 < factors[1] < factors[2] < 8.0   # blended band


@pytest.mark.assets
def test_gguf_frequencies_are_transformers_llama3_frequencies(converted):
    hf_dir, path = converted
    ours, _ = inverse_frequencies(load_gguf_config(path))
    hf = load_hf_model(hf_dir)
    theirs = hf.model.rotary_emb.inv_freq.float()
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
    plain = 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    assert (plain - theirs).abs().max() > 1e-2     # the scaling changes them: plain RoPE would be wrong


@pytest.mark.assets
@pytest.mark.parametrize("streaming", [False, True], ids=["resident", "streaming"])
def test_engine_on_the_gguf_gives_transformers_logits(converted, streaming):
    hf_dir, path = converted
    engine = Engine.from_pretrained(path, streaming=streaming)
    ids = engine.tokenizer.encode(TEXT, add_special_tokens=False)
    assert len(ids) >= 50
    ref = hf_logits(load_hf_model(hf_dir), ids)
    diff = (engine.logits(ids) - ref).abs().max().item()
    print(f"rope_freqs GGUF: max |logit diff| {diff:.3g} over {len(ids)} tokens")
    assert diff <= 1e-4


@pytest.mark.assets
def test_plain_rope_on_the_same_weights_would_differ(converted):
    """What the engine computed before rope_freqs was read: the same weights with plain RoPE agree at position 0
    only."""
    hf_dir, path = converted
    engine = Engine.from_pretrained(path)
    ids = engine.tokenizer.encode(TEXT, add_special_tokens=False)
    ref = hf_logits(load_hf_model(hf_dir), ids)
    diff = (engine.logits(ids) - ref).abs().max().item()
    plain_dir = hf_dir.parent / "plain"
    plain_dir.mkdir(exist_ok=True)
    config = json.loads((hf_dir / "config.json").read_text())
    config.pop("rope_scaling", None)
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    (plain_dir / "config.json").write_text(json.dumps(config))
    (plain_dir / "model.safetensors").symlink_to(hf_dir / "model.safetensors")
    plain = hf_logits(load_hf_model(plain_dir), ids)
    assert torch.allclose(plain[0], ref[0], atol=1e-5)
    assert (plain - ref).abs().max().item() > 100 * max(diff, 1e-6)


@pytest.mark.assets
def test_ggf007_passes_on_the_converted_file(converted):
    from llmdoctor.run.runner import run_checks
    _, path = converted
    report = run_checks(path, select=["GGF007"], device="cpu")
    assert [r.status for r in report.checks if r.id == "GGF007"] == ["passed"]
    assert [f for f in report.findings if f.check == "GGF007"] == []


def _config(rope_scaling: dict):
    return parse_config({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 10,
                         "hidden_size": 32, "intermediate_size": 8, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64,
                         "rope_theta": 10000.0, "rope_scaling": rope_scaling})


def test_freq_factors_divide_every_rope_type():
    """head_dim 16: 8 factors; they divide the type's own inverse frequencies (default, linear, yarn)."""
    factors = [1.0, 2.0, 4.0, 8.0, 1.0, 1.0, 1e30, 3.0]
    for block in ({"rope_type": "default"}, {"rope_type": "linear", "factor": 2.0},
                  {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}):
        base, scale = inverse_frequencies(_config(block))
        scaled, scale2 = inverse_frequencies(_config({**block, "freq_factors": factors}))
        assert scale == scale2
        torch.testing.assert_close(scaled, base / torch.tensor(factors), rtol=0, atol=0)
    table = build_rope_table(_config({"rope_type": "default", "freq_factors": factors}))
    assert torch.equal(table.cos[:, 6], torch.ones(64))       # a 1e30 factor: that pair does not rotate
    assert table.validate() == []


def test_freq_factors_of_the_wrong_length_or_value_are_refused():
    with pytest.raises(ModelDirError, match="has 3 values; rotary dimension 16 needs 8"):
        build_rope_table(_config({"rope_type": "default", "freq_factors": [1.0, 2.0, 3.0]}))
    with pytest.raises(ModelDirError, match="positive finite"):
        build_rope_table(_config({"rope_type": "default", "freq_factors": [1.0] * 7 + [0.0]}))
    with pytest.raises(ModelDirError, match="list of numbers"):
        build_rope_table(_config({"rope_type": "default", "freq_factors": ["x"] * 8}))


@pytest.mark.assets
def test_diff_sees_the_same_rope_in_both_spellings(converted):
    """DIF001: the HF directory's rope_scaling llama3 and the GGUF's rope_freqs rotate alike: no warning."""
    from llmdoctor.run.diff_runner import run_diff
    hf_dir, path = converted
    report = run_diff(hf_dir, path, quick=True, select=["DIF001"])
    assert [f.message for f in report.findings_for("DIF001") if f.severity.value != "info"] == []


def test_same_rope_compares_frequencies_not_spellings():
    from checks.diff.config_files import same_rope
    llama3 = _config(LLAMA3)
    factors = (torch.tensor(1.0) / (inverse_frequencies(llama3)[0] * 10000.0 ** (torch.arange(0, 16, 2) / 16))).tolist()
    assert same_rope(llama3, _config({"rope_type": "default", "freq_factors": factors}))
    assert not same_rope(llama3, _config({"rope_type": "default", "freq_factors": [1.0] * 8}))
    assert not same_rope(llama3, _config(None))
    dynamic, linear = _config({"rope_type": "dynamic", "factor": 2.0}), _config({"rope_type": "linear", "factor": 1.0})
    assert not same_rope(dynamic, linear)     # equal table, but dynamic grows past max_position_embeddings
