"""Every engine family against transformers on random-weight models it built: fp32 logits within 1e-4 over
256 tokens, and 32 greedy tokens (prefill + decode steps through the paged cache) identical."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core import CoreEngine
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_families import CLASSIC
from tests.reference_engine.core.tiny_models import hf_model, load_hf, model_dir, random_ids
from tests.reference_engine.core.greedy import greedy, hf_greedy

TOL = 1e-4
FIDELITY: dict[str, float] = {}


def core(variant: str, **kw) -> CoreEngine:
    return CoreEngine.from_pretrained(model_dir(variant), **kw)


@pytest.mark.parametrize("variant", [v for v in CLASSIC.variants if v != "llama_dynamic_ntk"])
def test_logits_over_256_tokens_and_greedy_32_match_transformers(variant):
    eng = core(variant)
    ids = random_ids(256, seed=1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    diff = (ours - theirs).abs().max().item()
    FIDELITY[variant] = diff
    print(f"\n{variant}: max |logit diff| {diff:.2e} (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL
    assert theirs.abs().max() > 0.5 and theirs.std() > 0.05      # not two flat tensors
    prompt = random_ids(40, seed=2)
    assert greedy(eng, prompt, 32) == hf_greedy(hf_model(variant), prompt, 32)
    assert eng.cache.stats().used_blocks == 0 and eng.validate(ours) == []


@pytest.mark.parametrize("variant", ["gemma3_gqa4_tied_5to1", "qwen2moe_shared_sparse_step",
                                     "phi4mini_longrope_partial_tied"])
def test_ragged_batch_and_chunked_prefill_match_each_sequence_alone(variant):
    eng = core(variant, block_size=4)
    prompts = [random_ids(n, seed=n) for n in (70, 9, 33)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for i, prompt in enumerate(prompts):
        assert (rows[i] - hf_logits(hf_model(variant), prompt)).abs().max().item() <= TOL
    eng.prefill([3], [prompts[0][:25]])                         # chunked: 25 tokens, then the rest
    last = eng.prefill([3], [prompts[0][25:]])
    assert (last[0] - hf_logits(hf_model(variant), prompts[0])[-1]).abs().max().item() <= TOL


def test_longrope_switches_to_long_factors_past_the_original_context():
    """Phi-3 LongRoPE: a step reaching past original_max_position_embeddings (64) uses the long factors for
    all of its positions, as transformers does; below it, the short ones."""
    variant = "phi35_longrope"
    eng = core(variant)
    short, long = random_ids(60, seed=5), random_ids(200, seed=5)
    for ids in (short, long):
        assert (eng.logits(ids) - hf_logits(load_hf(model_dir(variant)), ids)).abs().max().item() <= TOL
    assert not torch.allclose(eng.logits(long)[:60], eng.logits(short))


def test_dynamic_ntk_runs_past_max_position_embeddings_like_transformers():
    """Dynamic NTK grows the RoPE base for a step longer than max_position_embeddings (128) instead of
    refusing it; decode steps past it each use their own length, as transformers' cache path does."""
    variant = "llama_dynamic_ntk"
    eng = core(variant)
    assert eng.rope.unbounded
    ids = random_ids(200, seed=7)
    ours, theirs = eng.logits(ids), hf_logits(load_hf(model_dir(variant)), ids)
    FIDELITY[variant] = (ours - theirs).abs().max().item()
    print(f"\n{variant}: max |logit diff| {FIDELITY[variant]:.2e} over 200 tokens (max_position_embeddings 128)")
    assert FIDELITY[variant] <= TOL
    within = random_ids(100, seed=8)
    assert (eng.logits(within) - hf_logits(load_hf(model_dir(variant)), within)).abs().max().item() <= TOL
    prompt = random_ids(110, seed=9)                          # greedy from 110 to 142: crosses 128
    assert greedy(eng, prompt, 32) == hf_greedy(load_hf(model_dir(variant)), prompt, 32)
    assert eng.validate(positions=[3, 500]) == []             # no table end to run past


def test_moe_router_logits_are_captured_per_layer():
    eng = core("qwen2moe_shared_sparse_step")
    seen = {}

    def capture(layer, module, x):
        if module == "router":
            seen[layer] = x.shape
    eng.logits(random_ids(12), capture=capture)
    assert seen == {0: (12, 6), 2: (12, 6)}                   # layer 1 is dense (mlp_only_layers)
