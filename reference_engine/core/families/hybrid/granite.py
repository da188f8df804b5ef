"""Granite 4 (GraniteMoeHybridForCausalLM): Mamba2 layers beside a few GQA attention layers, a MoE MLP plus a
shared MLP on every layer, and Granite's four multipliers.

`layer_types` names each layer "mamba"/"linear_attention" (core/recurrent/mamba2.py) or "attention"/"full_attention";
attention runs with RoPE only when `position_embedding_type` is "rope". Multipliers: embeddings times
`embedding_multiplier`, attention scores times `attention_multiplier` (instead of head_dim ** -0.5), each
branch times `residual_multiplier` before the residual add, logits divided by `logits_scaling`. The MLP is the
router's top-k experts (softmax over the top-k logits == softmax, top-k, renormalise) plus `shared_mlp`, added
unscaled; with num_local_experts 0 only the shared MLP runs. Experts are stored fused: input_linear
[experts, 2 * intermediate, hidden] (gate then up), output_linear [experts, hidden, intermediate].
"""
from __future__ import annotations

from reference_engine.architectures.hybrid.granite import DATA
from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import KVLayout, LayerCache
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, MoESettings, PositionSettings,
                                                 Scales, Settings, raw_float, raw_int)
from reference_engine.core.families.hybrid.mamba import mamba_dims, mamba_plan, state_layout
from reference_engine.errors import ModelDirError

ARCHITECTURES = DATA.architectures
KINDS = {"mamba": "mamba2", "linear_attention": "mamba2", "attention": "attention", "full_attention": "attention"}


def experts(config: ModelConfig) -> int:
    return raw_int(config, "num_local_experts", 0)


def settings(config: ModelConfig) -> Settings:
    moe = None
    if experts(config):
        moe = MoESettings(num_experts=experts(config), top_k=raw_int(config, "num_experts_per_tok", 2),
                          norm_topk_prob=True, shared_expert=True,
                          sparse_layers=frozenset(range(config.num_hidden_layers)))
    embed = raw_float(config, "embedding_multiplier", 1.0)
    # attention without positions unless position_embedding_type says "rope" (Granite 4: "nope")
    nope = frozenset() if config.raw.get("position_embedding_type") == "rope" else frozenset(
        range(config.num_hidden_layers))
    return Settings(family="granite", attention=AttentionSettings(scale=raw_float(config, "attention_multiplier", 1.0)),
                    scales=Scales(embed=None if embed == 1.0 else embed,
                                  residual=raw_float(config, "residual_multiplier", 1.0),
                                  logits_divisor=raw_float(config, "logits_scaling", 1.0)),
                    positions=PositionSettings(nope_layers=nope), moe=moe,
                    mamba=mamba_dims(config) if "mamba2" in mixers(config) else None)


def mixers(config: ModelConfig) -> list[str]:
    n, types = config.num_hidden_layers, config.raw.get("layer_types")
    if types is None:
        return ["mamba2"] * n
    if not isinstance(types, list) or len(types) < n:    # longer: the first n (CFG041 reports the extra entries)
        raise ModelDirError("config.json", f"'layer_types' must list one type per layer ({n}), found {types!r:.80}")
    return [KINDS.get(str(t), str(t)) for t in types[:n]]


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h, d = f"model.layers.{n}.", config.hidden_size, config.head_dim
    plan: LayerPlan = {"input_norm": [(p + "input_layernorm.weight", (h,))],
                       "post_norm": [(p + "post_attention_layernorm.weight", (h,))]}
    shared = raw_int(config, "shared_intermediate_size", 1024)
    mlp = {"gate_up": [(p + "shared_mlp.input_linear.weight", (2 * shared, h))],
           "down": [(p + "shared_mlp.output_linear.weight", (h, shared))]}
    if experts(config):
        e, inter, m = experts(config), config.intermediate_size, p + "block_sparse_moe."
        plan["router"] = [(m + "router.layer.weight", (e, h))]
        plan["experts_gate_up"] = [(m + "input_linear.weight", (e, 2 * inter, h))]
        plan["experts_down"] = [(m + "output_linear.weight", (e, h, inter))]
        mlp = {"shared_gate_up": mlp["gate_up"], "shared_down": mlp["down"]}
    plan.update(mlp)
    if mixers(config)[n] == "attention":
        q_out, kv_out, a = config.num_attention_heads * d, config.num_key_value_heads * d, p + "self_attn."
        plan["qkv"] = [(a + "q_proj.weight", (q_out, h)), (a + "k_proj.weight", (kv_out, h)),
                       (a + "v_proj.weight", (kv_out, h))]
        plan["o"] = [(a + "o_proj.weight", (h, q_out))]
        if config.attention_bias:
            plan["qkv_bias"] = [(a + "q_proj.bias", (q_out,)), (a + "k_proj.bias", (kv_out,)),
                                (a + "v_proj.bias", (kv_out,))]
            plan["o_bias"] = [(a + "o_proj.bias", (h,))]
        return plan
    return {**plan, **mamba_plan(p + "mamba.", config)}


def cache_layout(config: ModelConfig) -> list[LayerCache]:
    kv = KVLayout(config.num_key_value_heads, config.head_dim, config.head_dim)
    kinds = mixers(config)
    if "mamba2" not in kinds:
        return [kv] * len(kinds)
    state = state_layout(mamba_dims(config))
    return [state if kind == "mamba2" else kv for kind in kinds]


FAMILY = Family("granite", ARCHITECTURES, settings, layer_plan, mixers=mixers, cache_layout=cache_layout)
