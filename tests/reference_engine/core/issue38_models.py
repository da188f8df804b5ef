"""Tiny random-weight models of the issue-38 families (SmolLM3, OLMo 2/3, MiniMax-M2, Llama 4 text), built by
transformers itself and scaled so that every feature bites at the tests' lengths: NoPE layers beside RoPE
layers, windows and chunks shorter than the sequences, routers whose choice differs from token to token.
The first test of a session that uses them pays transformers' import and the first model build (10-20 s on 2
busy cores); each later one takes about a second."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

from tests.reference_engine.core.family_models import BASE, load_hf
from tests.reference_engine.core.greedy import greedy, hf_greedy

# name -> (transformers config class, model class, overrides)
VARIANTS: dict[str, tuple[str, str, dict]] = {
    "smollm3_nope_gqa": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        num_hidden_layers=4, num_key_value_heads=2, no_rope_layers=[1, 0, 1, 0], tie_word_embeddings=True)),
    "smollm3_window_interval": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        num_hidden_layers=4, num_key_value_heads=1, no_rope_layer_interval=2, use_sliding_window=True,
        sliding_window=24, tie_word_embeddings=False, mlp_bias=True)),
    "olmo2_post_norm": ("Olmo2Config", "Olmo2ForCausalLM", dict(num_key_value_heads=2, num_hidden_layers=3)),
    "olmo3_windows_yarn": ("Olmo3Config", "Olmo3ForCausalLM", dict(
        num_key_value_heads=2, num_hidden_layers=4, sliding_window=20,
        rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                            "original_max_position_embeddings": 64},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    # rope_theta 500000 on both kinds, as the released OLMo 3 (transformers reads a flat config's sliding base
    # as Olmo3Config's default 500000, whatever rope_theta says)
    "olmo3_flat_yarn": ("Olmo3Config", "Olmo3ForCausalLM", dict(
        num_key_value_heads=2, num_hidden_layers=4, sliding_window=20,
        rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 500000.0,
                                            "original_max_position_embeddings": 64},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0}})),
    "minimax_m2_partial_rotary": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM", dict(
        num_key_value_heads=2, head_dim=16, rotary_dim=8, num_local_experts=6, num_experts_per_tok=2,
        intermediate_size=24)),
    "llama4_chunked_nope_moe": ("Llama4TextConfig", "Llama4ForCausalLM", dict(
        num_hidden_layers=4, num_key_value_heads=2, head_dim=8, intermediate_size=24, intermediate_size_mlp=40,
        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2, attention_chunk_size=16,
        no_rope_layers=[1, 1, 0, 1], floor_scale=8, attn_scale=0.5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
}

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-issue38-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def build(out: Path, variant: str, seed: int = 0, **extra) -> Path:
    """Save transformers' model of `variant` (overrides + extra) with weights drawn so features bite: norms in
    [0.5, 1.5], biases N(0, 0.1), a routing-correction bias that changes the experts picked."""
    import transformers
    config_cls, model_cls, overrides = VARIANTS[variant]
    config = getattr(transformers, config_cls)(**{**BASE, **overrides, **extra})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
            elif "experts" in name or "router" in name or name.endswith("gate.weight"):
                param.normal_(0.0, 0.3)
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.3)
    model.save_pretrained(out, safe_serialization=True)
    return out


@functools.cache
def model_dir(variant: str) -> Path:
    return build(_ROOT / variant, variant)


@functools.cache
def hf_model(variant: str):
    return load_hf(model_dir(variant))


TOL = 1e-4


def core(variant: str, **kw):
    from reference_engine.core import CoreEngine
    return CoreEngine.from_pretrained(model_dir(variant), **kw)


def check_against_transformers(variant: str, length: int = 256) -> float:
    """fp32 logits over `length` tokens within TOL of transformers' eager path, and 32 greedy tokens after a
    40-token prompt identical; returns the largest logit difference."""
    from tests.hf_models import hf_logits
    from tests.reference_engine.core.family_models import random_ids
    eng = core(variant)
    ids = random_ids(length, seed=1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    diff = (ours - theirs).abs().max().item()
    print(f"\n{variant}: max |logit diff| {diff:.2e} over {length} tokens (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL
    assert theirs.abs().max() > 0.5 and theirs.std() > 0.05      # not two flat tensors
    prompt = random_ids(40, seed=2)
    assert greedy(eng, prompt, 32) == hf_greedy(hf_model(variant), prompt, 32)
    assert eng.cache.stats().used_blocks == 0 and eng.validate(ours) == []
    return diff


def check_batch_equals_alone(variant: str) -> None:
    """A ragged batch (70, 9, 33 tokens, 4-token blocks) gives each sequence transformers' logits, and a prefill
    split in two chunks (25 + rest) gives the last row of the whole."""
    from tests.hf_models import hf_logits
    from tests.reference_engine.core.family_models import random_ids
    eng = core(variant, block_size=4)
    prompts = [random_ids(n, seed=n) for n in (70, 9, 33)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for i, prompt in enumerate(prompts):
        assert (rows[i] - hf_logits(hf_model(variant), prompt)).abs().max().item() <= TOL
    eng.prefill([3], [prompts[0][:25]])
    last = eng.prefill([3], [prompts[0][25:]])
    assert (last[0] - hf_logits(hf_model(variant), prompts[0])[-1]).abs().max().item() <= TOL


def bite(variant: str, **changes) -> float:
    """How far the engine's logits (100 tokens) move when its Settings lose a feature (e.g. nope_layers=
    frozenset(): rope on every layer): the tiny model must depend on every feature it claims to test."""
    from dataclasses import replace

    from tests.reference_engine.core.family_models import random_ids
    eng, ids = core(variant), random_ids(100, seed=3)
    base = eng.logits(ids)
    bound = eng.config.family
    moe = changes.pop("moe", None)
    settings = replace(bound.settings, **changes)
    if moe:
        settings = replace(settings, moe=replace(settings.moe, **moe))
    eng.config.family = replace(bound, settings=settings)
    try:
        return (eng.logits(ids) - base).abs().max().item()
    finally:
        eng.config.family = bound
