"""gpt-oss (GptOssForCausalLM): a MoE decoder with three numerics details of its own.

- Attention: q/k/v/o with biases, GQA, one learned sink logit per head inside the softmax
  (core/sink_attention.py), layers alternating a sliding window (128 in the released models) and full
  attention (`layer_types`; without them transformers puts the window on even layers), YaRN RoPE
  (core/rope.py reads factor, original_max_position_embeddings, beta_fast/slow and `truncate`).
- Router: a biased linear; the top-k logits are softmaxed among themselves (MoESettings.method "topk_softmax").
- Experts: transformers' fused tensors with biases and a clamped SwiGLU on interleaved gate/up columns
  (core/clamped_swiglu.py). MXFP4 checkpoints store them as *_blocks/*_scales (files/quant/mxfp4.py), read
  back to the same logical tensors.
Norms apply their weight in float32 (transformers keeps gpt-oss's norms in fp32).
"""
from __future__ import annotations

from reference_engine.architectures.moe.gpt_oss import DATA, DEFAULT_SWIGLU_ALPHA, DEFAULT_SWIGLU_LIMIT, DEFAULT_TOP_K
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (FUSED_DOWN, FUSED_DOWN_BIAS, FUSED_GATE_UP, FUSED_GATE_UP_BIAS,
                                                 Family, LayerPlan, MoESettings, Settings, attention_plan,
                                                 default_windows, norms_plan, raw_float, raw_int)
from reference_engine.errors import ModelDirError

ARCHITECTURES = DATA.architectures


def num_experts(config: ModelConfig) -> int:
    return raw_int(config, "num_local_experts", 0)


def top_k(config: ModelConfig) -> int:
    """num_experts_per_tok (transformers), else the original release's `experts_per_token`."""
    key = "num_experts_per_tok" if config.raw.get("num_experts_per_tok") is not None else "experts_per_token"
    return raw_int(config, key, DEFAULT_TOP_K)


def swiglu(config: ModelConfig, key: str, default: float) -> float:
    """transformers' default when the key is absent; a null (no clamp: transformers fails on it) is refused."""
    value = raw_float(config, key, default)
    if value is None:
        raise ModelDirError("config.json", f"'{key}' is null: gpt-oss's clamped SwiGLU needs a number")
    return value


def settings(config: ModelConfig) -> Settings:
    experts, k = num_experts(config), top_k(config)
    if experts < 1 or not 1 <= k <= experts:
        raise ModelDirError("config.json", f"num_experts_per_tok {k} must be between 1 and num_local_experts "
                                           f"({experts})")
    moe = MoESettings(num_experts=experts, top_k=k, norm_topk_prob=False, method="topk_softmax",
                      swiglu_limit=swiglu(config, "swiglu_limit", DEFAULT_SWIGLU_LIMIT),
                      swiglu_alpha=swiglu(config, "swiglu_alpha", DEFAULT_SWIGLU_ALPHA),
                      sparse_layers=frozenset(range(config.num_hidden_layers)))
    return Settings(family="gpt_oss", norm="rms_f32", moe=moe)


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h, inter = f"model.layers.{n}.", config.hidden_size, config.intermediate_size
    bias = bool(config.raw.get("attention_bias", True))
    e, m = num_experts(config), p + "mlp."
    return {**norms_plan(p, config), **attention_plan(p, config, q_bias=bias, o_bias=bias),
            "sinks": [(p + "self_attn.sinks", (config.num_attention_heads,))],
            "router": [(m + "router.weight", (e, h))],
            "router_bias": [(m + "router.bias", (e,))],
            FUSED_GATE_UP: [(m + "experts.gate_up_proj", (e, h, 2 * inter))],
            FUSED_GATE_UP_BIAS: [(m + "experts.gate_up_proj_bias", (e, 2 * inter))],
            FUSED_DOWN: [(m + "experts.down_proj", (e, inter, h))],
            FUSED_DOWN_BIAS: [(m + "experts.down_proj_bias", (e, h))]}


def windows(config: ModelConfig) -> list[int | None]:
    """layer_types when given; else sliding on even layers, full on odd ones (GptOssConfig's default)."""
    window, n = config.sliding_window, config.num_hidden_layers
    if not window or isinstance(config.raw.get("layer_types"), list):
        return default_windows(config)
    return [window if (i + 1) % 2 else None for i in range(n)]


FAMILY = Family("gpt_oss", ARCHITECTURES, settings, layer_plan, windows)
