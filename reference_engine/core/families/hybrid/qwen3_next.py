"""Qwen3-Next and Qwen3.5 text (dense and MoE): hybrids of Gated DeltaNet and gated full attention.

`layer_types` (or, in older configs, `full_attention_interval`: every n-th layer full attention) says which
layers are "linear_attention" (core/recurrent/gated_delta_net.py, a recurrent state per sequence) and which
"full_attention" (the GQA block with Qwen3-Next's output gate: q_proj gives each head its query and a gate,
`sigmoid(gate) * attention` goes into o_proj; per-head q/k norms; partial rotary, 0.25 of head_dim by default).
Every RMSNorm is zero-centred, `(1 + w) * norm(x)` in float32 ("rms_plus_one"), except the DeltaNet's gated
output norm. The MLP is Qwen2-MoE's (softmax router, top-k, a sigmoid-gated shared expert; dense on
`mlp_only_layers` and off the `decoder_sparse_step` grid) for Qwen3-Next, always MoE with renormalised top-k
for Qwen3.5-MoE, and a dense SwiGLU for Qwen3.5. Qwen3.5's text rope (`mrope_section`) rotates every axis by
the same text position, which is plain RoPE.

Tensors: Qwen3-Next stores the DeltaNet input projections grouped per key head (`in_proj_qkvz`, `in_proj_ba`),
Qwen3.5 flat and split (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`, fused here into the same roles).
"""
from __future__ import annotations

from dataclasses import dataclass

from reference_engine.architectures.hybrid.qwen3_next import DATA, DENSE, MOE, NEXT
from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import KVLayout, LayerCache, StateLayout
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, MoESettings, Settings,
                                                 attention_plan, mlp_plan, norms_plan, raw_int)
from reference_engine.core.families.moe.moe import expert_names
from reference_engine.errors import ModelDirError
from reference_engine.limits import MAX_HEAD_DIM, MAX_HEADS, check_size

ARCHITECTURES = DATA.architectures
KINDS = {"linear_attention": "gated_delta_net", "full_attention": "attention"}
MAX_CONV_KERNEL = 1 << 10          # the short conv's window; public models use 4


@dataclass(frozen=True)
class DeltaNetDims:
    k_heads: int
    v_heads: int
    k_dim: int            # per head
    v_dim: int            # per head
    kernel: int           # conv window K

    @property
    def key_dim(self) -> int:
        return self.k_heads * self.k_dim

    @property
    def value_dim(self) -> int:
        return self.v_heads * self.v_dim

    @property
    def conv_dim(self) -> int:           # channels of the conv: q, k and v side by side
        return 2 * self.key_dim + self.value_dim


def dims(config: ModelConfig) -> DeltaNetDims:
    """The DeltaNet's sizes (transformers' defaults where absent), each bounded (one-line ModelDirError)."""
    def size(key: str, default: int, limit: int) -> int:
        return check_size(key, config.raw.get(key, default), limit, "config.json")
    return DeltaNetDims(size("linear_num_key_heads", 16, MAX_HEADS),
                        size("linear_num_value_heads", 32, MAX_HEADS),
                        size("linear_key_head_dim", 128, MAX_HEAD_DIM),
                        size("linear_value_head_dim", 128, MAX_HEAD_DIM),
                        size("linear_conv_kernel_dim", 4, MAX_CONV_KERNEL))


def layer_types(config: ModelConfig) -> list[str]:
    """`layer_types` as listed, else every `full_attention_interval`-th layer full attention (transformers'
    default: 4); ModelDirError for a list that does not cover every layer with a known kind. (A longer list
    is read up to num_hidden_layers: the checks size tables on copies with fewer layers; CFG052 reports it.)"""
    n, types = config.num_hidden_layers, config.raw.get("layer_types")
    if types is None:
        interval = raw_int(config, "full_attention_interval", 4)
        if interval < 1:
            raise ModelDirError("config.json", "'full_attention_interval' must be >= 1, found 0")
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    if not isinstance(types, list) or len(types) < n:
        raise ModelDirError("config.json", f"'layer_types' must list one kind per layer ({n}), found "
                                           f"{len(types) if isinstance(types, list) else repr(types)}")
    unknown = sorted({str(t) for t in types} - set(KINDS))
    if unknown:
        raise ModelDirError("config.json", f"'layer_types' holds {unknown[0]!r}: only linear_attention and "
                                           "full_attention exist in this family")
    return list(types[:n])


def sparse_layers(config: ModelConfig) -> frozenset:
    n, arch = config.num_hidden_layers, config.architecture
    if arch == DENSE:
        return frozenset()
    if arch == MOE:
        return frozenset(range(n))
    step = raw_int(config, "decoder_sparse_step", 1) or 1
    dense = config.raw.get("mlp_only_layers") or []
    experts = raw_int(config, "num_experts", 0)
    return frozenset(i for i in range(n) if i not in dense and (i + 1) % step == 0 and experts > 0)


def settings(config: ModelConfig) -> Settings:
    d = dims(config)
    if d.v_heads % d.k_heads:
        raise ModelDirError("config.json", f"linear_num_value_heads ({d.v_heads}) is not a multiple of "
                                           f"linear_num_key_heads ({d.k_heads})")
    moe = None
    if sparse_layers(config) or config.architecture == MOE:
        experts, top_k = raw_int(config, "num_experts", 0), raw_int(config, "num_experts_per_tok", 1)
        if experts < 1 or not 1 <= top_k <= experts:
            raise ModelDirError("config.json", f"num_experts_per_tok {top_k} must be between 1 and the number "
                                               f"of experts ({experts})")
        norm_topk = config.architecture == MOE or bool(config.raw.get("norm_topk_prob", True))
        moe = MoESettings(num_experts=experts, top_k=top_k, norm_topk_prob=norm_topk, shared_expert=True,
                          sparse_layers=sparse_layers(config))
    return Settings(family="qwen3_next", norm="rms_plus_one",
                    attention=AttentionSettings(qk_norm="head", output_gate=True), moe=moe)


def mixers(config: ModelConfig) -> list[str]:
    return [KINDS[t] for t in layer_types(config)]


def cache_layout(config: ModelConfig) -> list[LayerCache]:
    """Attention layers: K and V per token; DeltaNet layers: the conv window and the delta-rule state."""
    d = dims(config)
    state = StateLayout((("conv", (d.conv_dim, d.kernel - 1)), ("recurrent", (d.v_heads, d.k_dim, d.v_dim))))
    kv = KVLayout(config.num_key_value_heads, config.head_dim, config.head_dim)
    return [kv if kind == "attention" else state for kind in mixers(config)]


def delta_net_plan(p: str, config: ModelConfig) -> LayerPlan:
    d, h, a = dims(config), config.hidden_size, p + "linear_attn."
    plan: LayerPlan = {"conv": [(a + "conv1d.weight", (d.conv_dim, 1, d.kernel))],
                       "A_log": [(a + "A_log", (d.v_heads,))], "dt_bias": [(a + "dt_bias", (d.v_heads,))],
                       "norm": [(a + "norm.weight", (d.v_dim,))], "out": [(a + "out_proj.weight", (h, d.value_dim))]}
    if config.architecture == NEXT:
        plan["qkvz_grouped"] = [(a + "in_proj_qkvz.weight", (d.conv_dim + d.value_dim, h))]
        plan["ba_grouped"] = [(a + "in_proj_ba.weight", (2 * d.v_heads, h))]
    else:
        plan["qkvz"] = [(a + "in_proj_qkv.weight", (d.conv_dim, h)), (a + "in_proj_z.weight", (d.value_dim, h))]
        plan["ba"] = [(a + "in_proj_b.weight", (d.v_heads, h)), (a + "in_proj_a.weight", (d.v_heads, h))]
    return plan


def gated_attention_plan(p: str, config: ModelConfig) -> LayerPlan:
    """Llama's q/k/v/o with q_proj twice as tall (each head's query, then its gate) and per-head q/k norms."""
    bias = config.attention_bias
    plan = attention_plan(p, config, q_bias=bias, o_bias=bias, qk_norm="head")
    q_out = config.num_attention_heads * config.head_dim
    name, (_, h) = plan["qkv"][0]
    plan["qkv"] = [(name, (2 * q_out, h)), *plan["qkv"][1:]]
    if bias:
        plan["qkv_bias"] = [(plan["qkv_bias"][0][0], (2 * q_out,)), *plan["qkv_bias"][1:]]
    return plan


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h = f"model.layers.{n}.", config.hidden_size
    mixer = gated_attention_plan(p, config) if mixers(config)[n] == "attention" else delta_net_plan(p, config)
    plan = {**norms_plan(p, config), **mixer}
    if n not in sparse_layers(config):
        return {**plan, **mlp_plan(p + "mlp.", h, config.intermediate_size)}
    router, gate, up, down = expert_names(config.architecture, p)
    size, experts = raw_int(config, "moe_intermediate_size", config.intermediate_size), raw_int(config, "num_experts")
    plan["router"] = [(router, (experts, h))]
    plan["experts_gate_up"] = [[(gate.format(e=e), (size, h)), (up.format(e=e), (size, h))] for e in range(experts)]
    plan["experts_down"] = [[(down.format(e=e), (h, size))] for e in range(experts)]
    shared = mlp_plan(p + "mlp.shared_expert.", h, raw_int(config, "shared_expert_intermediate_size", 0))
    plan["shared_gate_up"], plan["shared_down"] = shared["gate_up"], shared["down"]
    plan["shared_gate"] = [(p + "mlp.shared_expert_gate.weight", (1, h))]
    return plan


FAMILY = Family("qwen3_next", ARCHITECTURES, settings, layer_plan, mixers=mixers, cache_layout=cache_layout)
