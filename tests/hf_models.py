"""Tiny model directories built by transformers itself (the oracle), for logits comparisons.

`build_hf_model(out_dir, variant)` instantiates the architecture's transformers class from a config,
randomises the weights (norm weights and biases too: transformers initialises them to 1 and 0, which would
hide a norm or bias bug), and saves it with `save_pretrained(safe_serialization=True)`.
`load_hf_model(dir)` loads it back in float32 eval mode with the SDPA attention implementation.
"""
from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 97

# name -> (architecture, config overrides); heads/kv_heads cover GQA ratios 1 (MHA), 3, 4 and MQA
VARIANTS: dict[str, tuple[str, dict]] = {
    "llama_mha_untied": ("llama", dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)),
    "llama_gqa4_tied_bias": ("llama", dict(num_attention_heads=8, num_key_value_heads=2, hidden_size=64,
                                           tie_word_embeddings=True, attention_bias=True, mlp_bias=True)),
    "mistral_gqa3_window": ("mistral", dict(num_attention_heads=6, num_key_value_heads=2, hidden_size=48,
                                            sliding_window=24, tie_word_embeddings=False)),
    "qwen2_mqa_bias": ("qwen2", dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True)),
    "qwen3_qknorm_odd_head_dim": ("qwen3", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                                                tie_word_embeddings=False)),
    "llama_rope_linear": ("llama", dict(num_key_value_heads=2, rope_scaling={"rope_type": "linear", "factor": 4.0})),
    "llama_rope_dynamic": ("llama", dict(num_key_value_heads=2, rope_scaling={"rope_type": "dynamic", "factor": 2.5})),
    "llama_rope_llama3": ("llama", dict(num_key_value_heads=2, rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})),
    "llama_rope_yarn": ("llama", dict(num_key_value_heads=2, max_position_embeddings=256, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen2_rope_yarn_mscale": ("qwen2", dict(num_key_value_heads=2, rope_scaling={
        "rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 80, "beta_fast": 16,
        "mscale": 0.8, "mscale_all_dim": 0.5})),
}

BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.08, rope_theta=10000.0)


def hf_classes(arch: str):
    import transformers
    names = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}[arch]
    return getattr(transformers, f"{names}Config"), getattr(transformers, f"{names}ForCausalLM")


def build_hf_model(out_dir: str | Path, variant: str, seed: int = 0, **overrides) -> Path:
    arch, variant_overrides = VARIANTS[variant]
    config_cls, model_cls = hf_classes(arch)
    kwargs = {**BASE, **variant_overrides, **overrides}
    rope_scaling = kwargs.pop("rope_scaling", None)
    rope_theta = kwargs.pop("rope_theta")
    rope = {"rope_type": "default", **(rope_scaling or {}), "rope_theta": rope_theta}
    config = config_cls(rope_parameters=rope, **kwargs)
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    return out


def load_hf_model(model_dir: str | Path):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                              attn_implementation="sdpa")
    return model.eval()


@torch.no_grad()
def hf_logits(model, token_ids: list[int]) -> torch.Tensor:
    """[seq, vocab] float32 logits of one unpadded sequence."""
    ids = torch.tensor([token_ids], dtype=torch.int64)
    return model(input_ids=ids, use_cache=False).logits[0].float()
