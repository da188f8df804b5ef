"""Tiny random-weight models of the issue-38 families (SmolLM3, OLMo 2/3, MiniMax-M2, Llama 4 text), built by
transformers itself and scaled so that every feature bites at the tests' lengths: NoPE layers beside RoPE
layers, windows and chunks shorter than the sequences, routers whose choice differs from token to token."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

from tests.reference_engine.core.family_models import BASE, load_hf

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
