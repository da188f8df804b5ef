"""LFM2 and Granite 4 against transformers on tiny random-weight models it built: fp32 logits within 1e-4 over
120 tokens (longer than the conv windows and the Mamba2 chunks), 24 greedy tokens identical, a chunked prefill
(at several chunk sizes) and a token-by-token decode equal to one prefill, a batch of unequal lengths equal to
each sequence alone, the recurrent states allocated, forked, reset and freed with their sequences."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core import CoreEngine
from reference_engine.errors import UnsupportedError
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_families import HYBRID
from tests.reference_engine.core.tiny_models import hf_model, model_dir, random_ids
from tests.reference_engine.core.greedy import greedy, hf_greedy

TOL = 1e-4


def core(variant: str, **kw) -> CoreEngine:
    return CoreEngine.from_pretrained(model_dir(variant), **kw)


@pytest.mark.parametrize("variant", list(HYBRID.variants))
def test_logits_and_greedy_match_transformers(variant):
    eng = core(variant)
    ids = random_ids(120, seed=1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    diff = (ours - theirs).abs().max().item()
    print(f"\n{variant}: max |logit diff| {diff:.2e} (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL
    assert theirs.std() > 0.05
    prompt = random_ids(30, seed=2)
    assert greedy(eng, prompt, 24) == hf_greedy(hf_model(variant), prompt, 24)
    assert eng.cache.stats().used_blocks == 0 and not eng.cache.states.states and eng.validate(ours) == []


@pytest.mark.parametrize("variant", list(HYBRID.variants))
@pytest.mark.parametrize("chunk", [1, 3, 7, 16])
def test_chunked_prefill_and_step_decode_equal_one_prefill(variant, chunk):
    eng = core(variant, block_size=4)
    ids = random_ids(40, seed=3)
    full = eng.logits(ids)
    with eng.scratch() as (seq,):
        rows = [eng.prefill([seq], [ids[i:i + chunk]], all_logits=True) for i in range(0, len(ids), chunk)]
    assert (torch.cat(rows) - full).abs().max().item() <= TOL


@pytest.mark.parametrize("variant", list(HYBRID.variants))
def test_batch_of_unequal_lengths_equals_each_alone(variant):
    eng = core(variant, block_size=4)
    prompts = [random_ids(n, seed=n) for n in (37, 5, 21)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for i, prompt in enumerate(prompts):
        assert (rows[i] - eng.logits(prompt)).abs().max().item() <= TOL
    step = eng.decode([0, 1, 2], [7, 8, 9])                     # decode the three together
    for i, prompt in enumerate(prompts):
        assert (step[i] - eng.logits(prompt + [7 + i])[-1]).abs().max().item() <= TOL


def test_fork_copies_the_state_and_a_freed_id_starts_from_zero():
    eng = core("granite4_moe_rope")
    ids = random_ids(20, seed=4)
    eng.prefill(["a"], [ids])
    eng.fork("a", "b")
    la, lb = eng.decode(["a", "b"], [5, 6])
    assert (la - eng.logits(ids + [5])[-1]).abs().max() <= TOL and (lb - eng.logits(ids + [6])[-1]).abs().max() <= TOL
    eng.free("a")
    again = eng.prefill(["a"], [ids[:3]])                      # the id is reused: its state starts at zero
    assert (again[0] - eng.logits(ids[:3])[-1]).abs().max() <= TOL
    eng.cache.truncate("b", 0)                                 # truncating to 0 resets the state
    assert all(t.abs().max() == 0 for layer in eng.cache.states.states["b"].values() for t in layer.values())
    with pytest.raises(ValueError, match="recurrent state"):
        eng.cache.truncate("a", 1)


def test_prefix_caching_is_refused_with_one_line():
    with pytest.raises(UnsupportedError, match="prefix caching is not available.*short_conv"):
        core("lfm2_conv3_attn1", prefix_caching=True)


def test_long_generation_keeps_the_state_finite():
    eng = core("lfm2_bias_untied_no_adjust")
    with eng.scratch() as (seq,):
        token = int(eng.prefill([seq], [random_ids(8)])[0].argmax())
        for _ in range(300):
            token = int(eng.decode([seq], [token])[0].argmax())
        assert eng.cache.states.validate({seq}) == []


@pytest.mark.parametrize("variant, edit, error, words", [
    ("lfm2_conv3_attn1", {"layer_types": ["conv", "full_attention"]}, "ModelDirError", "one type per layer"),
    ("lfm2_conv3_attn1", {"layer_types": ["conv", "full_attention", "mamba3", "conv"]}, "UnsupportedError",
     "layer kind 'mamba3' is not implemented"),
    ("granite4_moe_rope", {"mamba_n_heads": 3}, "ModelDirError", "mamba_n_heads 3"),
    ("granite4_moe_rope", {"time_step_limit": "wide"}, "ModelDirError", "time_step_limit"),
    ("granite4_moe_rope", {"mamba_d_state": 16}, "ModelDirError", "has shape"),
])
def test_broken_hybrid_configs_are_one_line_errors(tmp_path, variant, edit, error, words):
    import json
    import shutil
    out = tmp_path / "m"
    shutil.copytree(model_dir(variant), out)
    raw = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**raw, **edit}))
    with pytest.raises(Exception) as caught:
        CoreEngine.from_pretrained(out)
    assert type(caught.value).__name__ == error and words in str(caught.value) and "\n" not in str(caught.value)
