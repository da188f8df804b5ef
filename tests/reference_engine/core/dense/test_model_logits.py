"""Logits of the core against transformers (the oracle) on transformers-built tiny models, float32."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from reference_engine.engine import Engine
from reference_engine.errors import ModelDirError, UnsupportedError
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_models import LLAMA_LIKE, any_ids, engine, hf_model, model_dir

TOL = 1e-4


@pytest.mark.parametrize("variant", sorted(LLAMA_LIKE))
def test_logits_match_transformers_up_to_the_end_of_the_rope_table(variant):
    eng = engine(variant)
    ids = any_ids(eng.config.max_position_embeddings, seed=1)   # positions 0 .. max-1
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    assert ours.shape == theirs.shape == (len(ids), eng.config.vocab_size)
    assert ours.dtype == torch.float32
    assert (ours - theirs).abs().max().item() <= TOL
    assert theirs.abs().max() > 0.5  # the comparison is not between two near-zero tensors
    assert eng.cache.stats().used_blocks == 0 and eng.validate(ours) == []


@pytest.mark.parametrize("variant", ["qwen3_qknorm_odd_head_dim", "mistral_gqa3_window"])
def test_ragged_batch_matches_each_sequence_alone(variant):
    eng = engine(variant, block_size=4)
    prompts = [any_ids(n, seed=n) for n in (37, 5, 60)]
    packed = eng.prefill([0, 1, 2], prompts, all_logits=True)
    last = eng.prefill([3, 4, 5], prompts)                                  # last-token logits only
    rows = packed.split([len(p) for p in prompts])
    for i, prompt in enumerate(prompts):
        theirs = hf_logits(hf_model(variant), prompt)
        assert (rows[i] - theirs).abs().max().item() <= TOL
        assert (last[i] - theirs[-1]).abs().max().item() <= TOL
    # then decode the ragged batch one token per sequence and compare with transformers on the full text
    nxt = [7, 8, 9]
    step = eng.decode([0, 1, 2], nxt)
    for i, prompt in enumerate(prompts):
        theirs = hf_logits(hf_model(variant), prompt + [nxt[i]])[-1]
        assert (step[i] - theirs).abs().max().item() <= TOL
    assert eng.validate() == []


def test_positions_past_the_rope_table_are_an_error_not_a_wrap():
    eng = engine("llama_rope_yarn")
    with pytest.raises(ValueError, match="RoPE table"):
        eng.logits(any_ids(eng.config.max_position_embeddings + 1))
    assert eng.cache.sequences() == [] and eng.validate() == []
    assert any("position 300" in p for p in eng.validate(positions=[3, 300]))


def _copy_with_tensors(tmp_path, edit):
    src = model_dir("qwen2_mqa_bias")
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    tensors = load_file(dst / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors")
    return dst


def test_missing_tensor_is_named(tmp_path):
    d = _copy_with_tensors(tmp_path, lambda t: t.pop("model.layers.1.self_attn.k_proj.bias"))
    with pytest.raises(ModelDirError, match=r"missing tensor 'model\.layers\.1\.self_attn\.k_proj\.bias'"):
        Engine.from_pretrained(d)


def test_unexpected_tensor_is_named(tmp_path):
    d = _copy_with_tensors(tmp_path, lambda t: t.update({"model.layers.0.extra.weight": torch.zeros(3)}))
    with pytest.raises(ModelDirError, match=r"unexpected tensor 'model\.layers\.0\.extra\.weight'"):
        Engine.from_pretrained(d)


def test_misshaped_tensor_is_named(tmp_path):
    def edit(t):
        t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"][:-1].clone()
    d = _copy_with_tensors(tmp_path, edit)
    with pytest.raises(ModelDirError, match=r"'model\.layers\.0\.mlp\.up_proj\.weight' has shape \[55, 32\], "
                                            r"expected \[56, 32\]"):
        Engine.from_pretrained(d)


def test_unknown_architecture_and_rope_type_are_clear_errors(tmp_path):
    d = _copy_with_tensors(tmp_path, lambda t: None)
    raw = json.loads((d / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "mrope_made_up", "rope_theta": 10000.0, "factor": 2.0}
    (d / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UnsupportedError, match="mrope_made_up"):
        Engine.from_pretrained(d)
    raw["architectures"] = ["GPT2LMHeadModel"]
    (d / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UnsupportedError, match="GPT2LMHeadModel"):
        Engine.from_pretrained(d)


def test_bfloat16_engine_runs_and_stays_close():
    eng16 = engine("llama_mha_untied", dtype="bfloat16")
    ids = any_ids(40, seed=3)
    theirs = hf_logits(hf_model("llama_mha_untied"), ids)
    ours = eng16.logits(ids)
    assert ours.dtype == torch.float32 and eng16.cache.k_pools[0].dtype == torch.bfloat16
    assert (ours - theirs).abs().max().item() < 0.1
