"""DeepSeek-V2 / V3 (and Kimi K2, DeepSeek-V2-Lite): multi-head latent attention + MoE with shared experts.

Attention is the "mla" mixer (core/mla.py); the cache keeps one latent and one rope key per token
(`KVLayout(1, kv_lora_rank + qk_rope_head_dim, 0)`). Layers from `first_k_dense_replace` on (and on the
`moe_layer_freq` grid, as DeepSeek's own code) run routed experts plus `n_shared_experts` always-on experts
(one MLP of moe_intermediate_size * n_shared_experts), the others a dense MLP. Routing is data
(MoESettings, read by core/moe.py): V2 softmax "greedy" or "group_limited_greedy"; V3 "noaux_tc" (sigmoid,
e_score_correction_bias, groups). Defaults are transformers' (DeepseekV2Config / DeepseekV3Config).
GLM-4.5 (families/moe/glm4_moe.py) runs this MoE under GQA attention.
"""
from __future__ import annotations

from reference_engine.architectures.mla import deepseek as deepseek_data
from reference_engine.architectures.mla.deepseek import V2, V3
from reference_engine.architectures.moe import glm4_moe as glm_data
from reference_engine.architectures.moe.glm4_moe import GLM
from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import KVLayout, LayerCache
from reference_engine.core.families.base import (Family, LayerPlan, MLASettings, MoESettings, Settings, mlp_plan,
                                                 norms_plan, raw_float, raw_int)
from reference_engine.errors import ModelDirError

ARCHITECTURES = deepseek_data.DATA.architectures
# transformers' defaults, per architecture (a field absent from config.json takes these; GLM-4.5 shares the MoE)
DEFAULTS = {**deepseek_data.DEFAULTS, GLM: glm_data.DEFAULTS}


def field(config: ModelConfig, key: str) -> int:
    return raw_int(config, key, DEFAULTS[config.architecture].get(key))


def groups(config: ModelConfig, key: str) -> int:
    """n_group / topk_group: null (V2 greedy) means one group."""
    value = config.raw.get(key, DEFAULTS[config.architecture].get(key))
    return 1 if value is None else raw_int(config, key, value)


def q_lora_rank(config: ModelConfig) -> int | None:
    if "q_lora_rank" in config.raw and config.raw["q_lora_rank"] is None:
        return None                                            # DeepSeek-V2-Lite: a plain q_proj
    return field(config, "q_lora_rank")


def mla_settings(config: ModelConfig) -> MLASettings:
    nope, rope, v = (field(config, k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    if rope % 2 or rope < 2:
        raise ModelDirError("config.json", f"'qk_rope_head_dim' must be a positive even number, found {rope}")
    interleaved = config.architecture == V2 or bool(config.raw.get("rope_interleave", True))
    return MLASettings(q_lora_rank(config), field(config, "kv_lora_rank"), nope, rope, v, interleaved)


def routed_experts(config: ModelConfig) -> int:
    return field(config, "n_routed_experts")


def sparse_layers(config: ModelConfig) -> frozenset:
    """MoE layers: from first_k_dense_replace on, every moe_layer_freq-th (DeepSeek's rule; freq 1 in practice)."""
    first, freq = field(config, "first_k_dense_replace"), raw_int(config, "moe_layer_freq", 1) or 1
    if routed_experts(config) < 1:
        return frozenset()
    return frozenset(i for i in range(config.num_hidden_layers) if i >= first and i % freq == 0)


def moe_settings(config: ModelConfig, method: str, norm_topk_prob: bool) -> MoESettings:
    experts, top_k = routed_experts(config), raw_int(config, "num_experts_per_tok", 1)
    n_group, topk_group = groups(config, "n_group") or 1, groups(config, "topk_group") or 1
    if experts and not 1 <= top_k <= experts:
        raise ModelDirError("config.json", f"num_experts_per_tok {top_k} must be between 1 and n_routed_experts "
                                           f"({experts})")
    if method != "softmax_topk" and (experts % n_group or topk_group > n_group
                                     or top_k > topk_group * (experts // n_group)):
        raise ModelDirError("config.json", f"n_group {n_group} / topk_group {topk_group} do not fit "
                                           f"n_routed_experts {experts} with num_experts_per_tok {top_k}")
    if method == "noaux_tc" and experts // n_group < 2:
        raise ModelDirError("config.json", f"noaux_tc ranks each group by its two best experts: n_group {n_group} "
                                           f"leaves {experts // n_group} expert(s) per group")
    return MoESettings(num_experts=experts, top_k=top_k, norm_topk_prob=norm_topk_prob, cast_weights=False,
                       sparse_layers=sparse_layers(config), method=method, n_group=n_group,
                       topk_group=topk_group, router_fp32=True,
                       routed_scaling=raw_float(config, "routed_scaling_factor",
                                                DEFAULTS[config.architecture]["routed_scaling_factor"]))


def settings(config: ModelConfig) -> Settings:
    if config.architecture == V2:      # transformers' V2 router: no renormalisation whatever norm_topk_prob says
        grouped = config.raw.get("topk_method") == "group_limited_greedy"
        moe = moe_settings(config, "group_limited_greedy" if grouped else "softmax_topk", False)
    else:
        moe = moe_settings(config, "noaux_tc", bool(config.raw.get("norm_topk_prob", True)))
    return Settings(family="deepseek", moe=moe, mla=mla_settings(config))


def mla_plan(p: str, config: ModelConfig) -> LayerPlan:
    m, h, heads = mla_settings(config), config.hidden_size, config.num_attention_heads
    a, qk, bias = p + "self_attn.", m.qk_nope_head_dim + m.qk_rope_head_dim, config.attention_bias
    plan: LayerPlan = {"kv_a": [(a + "kv_a_proj_with_mqa.weight", (m.kv_lora_rank + m.qk_rope_head_dim, h))],
                       "kv_a_norm": [(a + "kv_a_layernorm.weight", (m.kv_lora_rank,))],
                       "kv_b": [(a + "kv_b_proj.weight", (heads * (m.qk_nope_head_dim + m.v_head_dim),
                                                          m.kv_lora_rank))],
                       "o": [(a + "o_proj.weight", (h, heads * m.v_head_dim))]}
    if m.q_lora_rank is None:
        plan["q"] = [(a + "q_proj.weight", (heads * qk, h))]
    else:
        plan["q_a"] = [(a + "q_a_proj.weight", (m.q_lora_rank, h))]
        plan["q_a_norm"] = [(a + "q_a_layernorm.weight", (m.q_lora_rank,))]
        plan["q_b"] = [(a + "q_b_proj.weight", (heads * qk, m.q_lora_rank))]
    if bias:
        if m.q_lora_rank is not None:
            plan["q_a_bias"] = [(a + "q_a_proj.bias", (m.q_lora_rank,))]
        plan["kv_a_bias"] = [(a + "kv_a_proj_with_mqa.bias", (m.kv_lora_rank + m.qk_rope_head_dim,))]
        plan["o_bias"] = [(a + "o_proj.bias", (h,))]
    return plan


def shared_moe_plan(p: str, config: ModelConfig, n: int, router_bias: bool, mlp_bias: bool = False) -> LayerPlan:
    """Layer n's MLP: dense, or routed experts + router (+ e_score_correction_bias) + shared experts."""
    h, m = config.hidden_size, p + "mlp."
    if n not in sparse_layers(config):
        return mlp_plan(m, h, config.intermediate_size, bias=mlp_bias)
    size, experts = field(config, "moe_intermediate_size"), range(routed_experts(config))
    plan: LayerPlan = {"router": [(m + "gate.weight", (len(experts), h))]}
    if router_bias:
        plan["e_score_correction_bias"] = [(m + "gate.e_score_correction_bias", (len(experts),))]
    plan["experts_gate_up"] = [[(f"{m}experts.{e}.gate_proj.weight", (size, h)),
                                (f"{m}experts.{e}.up_proj.weight", (size, h))] for e in experts]
    plan["experts_down"] = [[(f"{m}experts.{e}.down_proj.weight", (h, size))] for e in experts]
    shared = size * (field(config, "n_shared_experts") or 0)
    if shared:
        sp = mlp_plan(m + "shared_experts.", h, shared, bias=mlp_bias)
        plan.update({"shared_" + role: slot for role, slot in sp.items()})
    return plan


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p = f"model.layers.{n}."
    mlp_bias = config.architecture == V2 and bool(config.raw.get("mlp_bias", False))
    return {**norms_plan(p, config), **mla_plan(p, config),
            **shared_moe_plan(p, config, n, router_bias=config.architecture == V3, mlp_bias=mlp_bias)}


def mixers(config: ModelConfig) -> list[str]:
    return ["mla"] * config.num_hidden_layers


def cache_layout(config: ModelConfig) -> list[LayerCache]:
    """Per token and layer: the normed latent and the rotated rope key, one 'head', nothing for V."""
    m = mla_settings(config)
    return [KVLayout(1, m.kv_lora_rank + m.qk_rope_head_dim, 0)] * config.num_hidden_layers


FAMILY = Family("deepseek", ARCHITECTURES, settings, layer_plan, mixers=mixers, cache_layout=cache_layout)
