"""Tiny random-weight DeepSeek-V2/V3 (MLA) and GLM-4.5 models built by transformers (the oracle), cached per test
session, scaled so every feature bites: YaRN with mscale != mscale_all_dim and positions past
original_max_position_embeddings (64), q LoRA and plain q_proj, interleaved and rotate-half rope, routers whose
choice (experts and groups) changes from token to token, e_score_correction_bias large enough to change it,
first_k_dense_replace > 0, attention and MLP biases."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

VOCAB = 97
BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256, initializer_range=0.15,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64, beta_fast=32,
            beta_slow=1)

# name -> (transformers config class, model class, overrides)
VARIANTS: dict[str, tuple[str, str, dict]] = {
    "dsv3_qlora_yarn_groups": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        **MLA, q_lora_rank=24, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
        n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        rope_interleave=True, rope_parameters={**YARN, "mscale": 1.0, "mscale_all_dim": 0.7})),
    "kimi_k2_no_qlora_rotate_half": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        **MLA, q_lora_rank=None, n_routed_experts=6, n_group=1, topk_group=1, num_experts_per_tok=2,
        n_shared_experts=2, first_k_dense_replace=1, routed_scaling_factor=2.827, norm_topk_prob=True,
        rope_interleave=False, rope_parameters={**YARN, "factor": 2.0, "original_max_position_embeddings": 128,
                                               "mscale": 1.0, "mscale_all_dim": 1.0})),
    "dsv2_lite_greedy": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        **MLA, q_lora_rank=None, n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=2,
        first_k_dense_replace=1, topk_method="greedy", routed_scaling_factor=1.0,
        rope_parameters={**YARN, "mscale": 0.707, "mscale_all_dim": 0.9})),
    "dsv2_group_limited_bias": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        **MLA, q_lora_rank=20, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
        n_shared_experts=1, first_k_dense_replace=2, num_hidden_layers=4, topk_method="group_limited_greedy",
        routed_scaling_factor=16.0, attention_bias=True, mlp_bias=True, rope_parameters={"rope_type": "default",
                                                                                        "rope_theta": 10000.0})),
    "glm45_qknorm_groups_bias": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(
        num_key_value_heads=2, head_dim=16, n_routed_experts=8, n_group=2, topk_group=1, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        use_qk_norm=True, attention_bias=True, partial_rotary_factor=0.5)),
    "glm45_plain_one_group": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(
        num_key_value_heads=1, n_routed_experts=5, n_group=1, topk_group=1, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=2, routed_scaling_factor=1.0, norm_topk_prob=False,
        use_qk_norm=False, attention_bias=False)),
}

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-mla-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def build(out: Path, variant: str, seed: int = 0, **overrides) -> Path:
    import transformers
    config_cls, model_cls, kw = VARIANTS[variant]
    config = getattr(transformers, config_cls)(**{**BASE, **kw, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):    # big enough to change which experts win
                buf.normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)
    return out


@functools.cache
def model_dir(variant: str) -> Path:
    return build(_ROOT / variant, variant)


@functools.cache
def hf_model(variant: str):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir(variant), dtype=torch.float32,
                                                             attn_implementation="eager").eval()


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def checkable_dir(out: Path, variant: str, seed: int = 0, **overrides) -> Path:
    """The variant with the factory's trained tokenizer (vocabulary, special ids, chat template), so that
    `llmdoctor check` runs every check on it."""
    import json

    from reference_engine.testing import factory
    tok = factory.tokenizer_json()
    ids = factory.special_ids(tok)
    build(out, variant, seed, vocab_size=factory.tokenizer_length(tok), bos_token_id=ids[factory.BOS],
          eos_token_id=ids[factory.IM_END], pad_token_id=ids[factory.PAD], **overrides)
    config = json.loads((out / "config.json").read_text())
    for name, obj in (("generation_config.json", factory.generation_config(config)),
                      ("tokenizer.json", tok), ("tokenizer_config.json", factory.tokenizer_config(tok, config)),
                      ("special_tokens_map.json", {"bos_token": factory.BOS, "eos_token": factory.IM_END,
                                                   "pad_token": factory.PAD})):
        (out / name).write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
