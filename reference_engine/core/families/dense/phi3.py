"""Phi-3 / Phi-3.5 / Phi-4-mini: the Llama layer with fused `qkv_proj` and `gate_up_proj` tensors; LongRoPE
(short/long factors) and a partial rotary dimension are handled by rope.py from the config."""
from __future__ import annotations

from reference_engine.architectures.dense.phi3 import DATA
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import Family, LayerPlan, Settings, norms_plan

ARCHITECTURES = DATA.architectures


def settings(config: ModelConfig) -> Settings:
    return Settings(family="phi3")


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p = f"model.layers.{n}."
    h, d, i = config.hidden_size, config.head_dim, config.intermediate_size
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    return {**norms_plan(p, config),
            "qkv": [(p + "self_attn.qkv_proj.weight", (q_out + 2 * kv_out, h))],
            "o": [(p + "self_attn.o_proj.weight", (h, q_out))],
            "gate_up": [(p + "mlp.gate_up_proj.weight", (2 * i, h))],
            "down": [(p + "mlp.down_proj.weight", (h, i))]}


FAMILY = Family("phi3", ARCHITECTURES, settings, layer_plan)
