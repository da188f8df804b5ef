"""Llama 4 text decoder (`Llama4ForCausalLM`; the text half of Scout and Maverick).

- Positions: `no_rope_layers[i]` 1 = RoPE, 0 = NoPE (every 4th layer by default). RoPE layers rotate adjacent
  pairs (transformers' complex multiply, core/positions.py) with llama3 scaling, then l2-norm every q/k head
  (`use_qk_norm`); NoPE layers scale q by the attention temperature (`attn_temperature_tuning`, `attn_scale`,
  `floor_scale`).
- Chunked local attention: with `attention_chunk_size`, the RoPE layers ("chunked_attention" in `layer_types`)
  attend only within their chunk of positions; the NoPE layers attend to everything.
- Interleaved MoE: layers in `moe_layers` (default every `interleave_moe_layer_step`-th) run a sigmoid top-k
  router whose score scales the expert's input, plus a shared expert of `intermediate_size`; the other layers
  a dense MLP of `intermediate_size_mlp`. Experts are stored fused and transposed: gate_up_proj [E, hidden,
  2 * intermediate], down_proj [E, intermediate, hidden].
"""
from __future__ import annotations

from reference_engine.architectures.moe.llama4 import DATA
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, MoESettings, PositionSettings,
                                                 Settings, attention_plan, mlp_plan, nope_layers, norms_plan, raw_float,
                                                 raw_int, raw_int_list)
from reference_engine.errors import ModelDirError

ARCHITECTURES = DATA.architectures


def moe_layers(config: ModelConfig) -> frozenset:
    n, listed = config.num_hidden_layers, raw_int_list(config, "moe_layers")
    if listed is not None:
        return frozenset(i for i in listed if 0 <= i < n)
    step = raw_int(config, "interleave_moe_layer_step", 1)
    if step < 1:
        raise ModelDirError("config.json", "'interleave_moe_layer_step' must be at least 1")
    return frozenset(range(step - 1, n, step))


def chunk_size(config: ModelConfig) -> int | None:
    chunk = config.raw.get("attention_chunk_size")
    return None if chunk is None else raw_int(config, "attention_chunk_size")


def chunked_layers(config: ModelConfig) -> frozenset:
    """`layer_types` "chunked_attention" entries, else every RoPE layer when a chunk size is set."""
    n, types = config.num_hidden_layers, config.raw.get("layer_types")
    if chunk_size(config) is None:
        return frozenset()
    if isinstance(types, list) and len(types) == n:
        return frozenset(i for i, t in enumerate(types) if t == "chunked_attention")
    return frozenset(range(n)) - nope_layers(config)


def settings(config: ModelConfig) -> Settings:
    experts, top_k = raw_int(config, "num_local_experts", 16), raw_int(config, "num_experts_per_tok", 1)
    if experts < 1 or not 1 <= top_k <= experts:
        raise ModelDirError("config.json", f"num_experts_per_tok {top_k} must be between 1 and the number of "
                                           f"experts ({experts})")
    moe = MoESettings(num_experts=experts, top_k=top_k, norm_topk_prob=False, sparse_layers=moe_layers(config),
                      method="sigmoid_topk", scale_input=True)
    tuning = config.raw.get("attn_temperature_tuning", True)
    temperature = (raw_float(config, "attn_scale", 0.1), raw_float(config, "floor_scale", 8192)) if tuning else None
    chunk = chunk_size(config)
    if chunk == 0:
        raise ModelDirError("config.json", "'attention_chunk_size' must be positive or null")
    return Settings(family="llama4", moe=moe,
                    attention=AttentionSettings(qk_l2_norm=bool(config.raw.get("use_qk_norm", True)),
                                                chunked_layers=chunked_layers(config), chunk=chunk),
                    positions=PositionSettings(nope_layers=nope_layers(config), temperature=temperature,
                                               interleaved=True))


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h, bias = f"model.layers.{n}.", config.hidden_size, config.attention_bias
    plan = {**norms_plan(p, config), **attention_plan(p, config, q_bias=bias, o_bias=bias)}
    f = p + "feed_forward."
    if n not in moe_layers(config):
        return {**plan, **mlp_plan(f, h, raw_int(config, "intermediate_size_mlp", config.intermediate_size))}
    experts, inter = raw_int(config, "num_local_experts", 16), config.intermediate_size
    shared = mlp_plan(f + "shared_expert.", h, inter)
    return {**plan, "router": [(f + "router.weight", (experts, h))],
            "experts_gate_up_in": [(f + "experts.gate_up_proj", (experts, h, 2 * inter))],
            "experts_down_in": [(f + "experts.down_proj", (experts, inter, h))],
            "shared_gate_up": shared["gate_up"], "shared_down": shared["down"]}


def windows(config: ModelConfig) -> list[None]:
    return [None] * config.num_hidden_layers


FAMILY = Family("llama4", ARCHITECTURES, settings, layer_plan, windows)
