"""Tiny random-weight models of every engine family, built by transformers itself (the oracle), cached per
test session. Each variant names what it covers (tied/untied, GQA ratio, sliding layout, RoPE kind)."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

VOCAB = 97
BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LONGROPE = dict(rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=64,
                short_factor=[1.0 + 0.1 * i for i in range(3)], long_factor=[1.5 + 0.5 * i for i in range(3)])

# name -> (transformers config class, model class, overrides)
VARIANTS: dict[str, tuple[str, str, dict]] = {
    "gemma2_gqa2_tied_softcap": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_key_value_heads=2, head_dim=16, sliding_window=24, query_pre_attn_scalar=24,
        attn_logit_softcapping=3.0, final_logit_softcapping=5.0)),
    "gemma2_mha_untied_nocap": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_key_value_heads=4, head_dim=8, sliding_window=16, tie_word_embeddings=False, num_hidden_layers=3,
        attn_logit_softcapping=None, final_logit_softcapping=None)),
    "gemma3_gqa4_tied_5to1": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_attention_heads=8, num_key_value_heads=2, head_dim=32, sliding_window=20, num_hidden_layers=6,
        layer_types=["sliding_attention"] * 5 + ["full_attention"])),
    "gemma3_mqa_untied_linear_global": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_key_value_heads=1, head_dim=16, sliding_window=12, tie_word_embeddings=False, num_hidden_layers=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    "phi3_gqa2_untied": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=2)),
    "phi3_mha_window": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=4, sliding_window=40)),
    # original_max_position_embeddings also at the top level: transformers' Phi3Config otherwise writes its
    # default (4096) into rope_parameters and the long factors never apply
    "phi35_longrope": ("Phi3Config", "Phi3ForCausalLM", dict(
        num_key_value_heads=2, hidden_size=48, original_max_position_embeddings=64,
        rope_parameters={**LONGROPE, "short_factor": [1.0] * 6, "long_factor": [1.0 + i for i in range(6)]})),
    "phi4mini_longrope_partial_tied": ("Phi3Config", "Phi3ForCausalLM", dict(
        num_key_value_heads=2, tie_word_embeddings=True, hidden_size=64, num_attention_heads=4,
        original_max_position_embeddings=64,
        rope_parameters={**LONGROPE, "partial_rotary_factor": 0.75, "short_factor": [1.0 + 0.05 * i for i in range(6)],
                         "long_factor": [1.0 + 0.7 * i for i in range(6)]})),
    "mixtral_gqa2": ("MixtralConfig", "MixtralForCausalLM", dict(
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, head_dim=8)),
    "mixtral_window_top1_tied": ("MixtralConfig", "MixtralForCausalLM", dict(
        num_key_value_heads=4, num_local_experts=3, num_experts_per_tok=1, sliding_window=32, head_dim=8,
        tie_word_embeddings=True)),
    "qwen2moe_shared_sparse_step": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=40, num_hidden_layers=3, decoder_sparse_step=1, mlp_only_layers=[1])),
    "qwen3moe_normtopk_tied": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        num_key_value_heads=1, num_experts=5, num_experts_per_tok=3, moe_intermediate_size=24, head_dim=12,
        norm_topk_prob=True, tie_word_embeddings=True)),
    "olmoe_clip": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        num_key_value_heads=4, num_experts=4, num_experts_per_tok=2, clip_qkv=2.0)),
    "llama_dynamic_ntk": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_key_value_heads=2, max_position_embeddings=128,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})),
}

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-families-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def build(out: Path, variant: str, seed: int = 0) -> Path:
    import transformers
    config_cls, model_cls, overrides = VARIANTS[variant]
    config = getattr(transformers, config_cls)(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    gemma = config_cls.startswith("Gemma")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:   # Gemma stores norm weights as offsets from 1
                param.uniform_(-0.5, 0.5) if gemma else param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)
    return out


@functools.cache
def family_dir(variant: str) -> Path:
    return build(_ROOT / variant, variant)


def load_hf(path: Path):
    """A fresh transformers model (eager attention: Gemma 2's soft-capping has no SDPA path)."""
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                             attn_implementation="eager").eval()


@functools.cache
def hf_model(variant: str):
    return load_hf(family_dir(variant))


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
