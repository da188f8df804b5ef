"""LFM2 (Liquid): short gated convolutions beside a few GQA attention layers.

`layer_types` says which layers are "conv" (core/recurrent/short_conv.py: in_proj -> B, C, x; B*x through a causal
depthwise conv of `conv_L_cache` taps; C * that -> out_proj) and which are "full_attention" (GQA with per-head
q/k RMSNorm, `q_layernorm`/`k_layernorm`). Every layer then runs a SwiGLU MLP (`feed_forward.w1/w3/w2`) whose
width `block_auto_adjust_ff_dim` shrinks to 2/3, times `block_ffn_dim_multiplier`, rounded up to
`block_multiple_of` (as transformers' Lfm2MLP). The final norm is `model.embedding_norm`.
A conv layer keeps its last conv_L_cache - 1 inputs per sequence (a StateLayout), an attention layer K/V.
"""
from __future__ import annotations

from reference_engine.architectures.hybrid.lfm2 import DATA
from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import KVLayout, LayerCache, StateLayout
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, Settings, raw_float, raw_int)
from reference_engine.errors import ModelDirError

ARCHITECTURES = DATA.architectures
KINDS = {"conv": "short_conv", "full_attention": "attention"}   # config.json layer_types -> model.MIXERS kind


def settings(config: ModelConfig) -> Settings:
    return Settings(family="lfm2", final_norm="model.embedding_norm.weight",
                    attention=AttentionSettings(qk_norm="head"))


def layer_types(config: ModelConfig) -> list[str]:
    """`layer_types`, or the older `full_attn_idxs` (the listed layers attend, the others convolve)."""
    n, types = config.num_hidden_layers, config.raw.get("layer_types")
    if types is None:
        idxs = config.raw.get("full_attn_idxs")
        idxs = list(range(n)) if idxs is None else idxs
        if not isinstance(idxs, list):
            raise ModelDirError("config.json", f"'full_attn_idxs' must be a list of layer indices, found {idxs!r}")
        return ["full_attention" if i in idxs else "conv" for i in range(n)]
    if not isinstance(types, list) or len(types) < n:    # longer: the first n (CFG041 reports the extra entries)
        raise ModelDirError("config.json", f"'layer_types' must list one type per layer ({n}), found {types!r:.80}")
    return [str(t) for t in types[:n]]


def mixers(config: ModelConfig) -> list[str]:
    # an unknown type passes through as its own kind: model.check_supported names it
    return [KINDS.get(t, t) for t in layer_types(config)]


def conv_kernel(config: ModelConfig) -> int:
    k = raw_int(config, "conv_L_cache", 3)
    if k < 1:
        raise ModelDirError("config.json", f"'conv_L_cache' must be >= 1, found {k}")
    return k


def ff_size(config: ModelConfig) -> int:
    """The MLP width transformers' Lfm2MLP builds from intermediate_size."""
    size = config.intermediate_size
    if config.raw.get("block_auto_adjust_ff_dim", True):
        size = int(2 * size / 3)
        mult = raw_float(config, "block_ffn_dim_multiplier", 1.0)
        if mult is not None:
            of = raw_int(config, "block_multiple_of", 256) or 1
            size = int(mult * size)
            size = of * ((size + of - 1) // of)
    return size


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h, d = f"model.layers.{n}.", config.hidden_size, config.head_dim
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    inter = ff_size(config)
    plan: LayerPlan = {"input_norm": [(p + "operator_norm.weight", (h,))],
                       "post_norm": [(p + "ffn_norm.weight", (h,))],
                       "gate_up": [(p + "feed_forward.w1.weight", (inter, h)),
                                   (p + "feed_forward.w3.weight", (inter, h))],
                       "down": [(p + "feed_forward.w2.weight", (h, inter))]}
    if mixers(config)[n] == "attention":
        a = p + "self_attn."
        plan["qkv"] = [(a + "q_proj.weight", (q_out, h)), (a + "k_proj.weight", (kv_out, h)),
                       (a + "v_proj.weight", (kv_out, h))]
        plan["o"] = [(a + "out_proj.weight", (h, q_out))]
        plan["q_norm"], plan["k_norm"] = [(a + "q_layernorm.weight", (d,))], [(a + "k_layernorm.weight", (d,))]
        return plan
    c = p + "conv."
    plan["conv_in"] = [(c + "in_proj.weight", (3 * h, h))]            # -> B, C, x [T, hidden] each
    plan["conv_weight"] = [(c + "conv.weight", (h, 1, conv_kernel(config)))]
    plan["conv_out"] = [(c + "out_proj.weight", (h, h))]
    if config.raw.get("conv_bias", False):
        plan["conv_in_bias"] = [(c + "in_proj.bias", (3 * h,))]
        plan["conv_bias"] = [(c + "conv.bias", (h,))]
        plan["conv_out_bias"] = [(c + "out_proj.bias", (h,))]
    return plan


def cache_layout(config: ModelConfig) -> list[LayerCache]:
    kv = KVLayout(config.num_key_value_heads, config.head_dim, config.head_dim)
    window = StateLayout((("conv", (config.hidden_size, conv_kernel(config) - 1)),))   # [hidden, K-1]
    return [kv if kind == "attention" else window for kind in mixers(config)]


FAMILY = Family("lfm2", ARCHITECTURES, settings, layer_plan, mixers=mixers, cache_layout=cache_layout)
