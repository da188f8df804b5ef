"""Gemma 2 and Gemma 3 (text): embeddings scaled by sqrt(hidden), RMSNorm with (1 + weight) in float32, a norm
before and after each branch, GELU-tanh MLP, attention scaled by query_pre_attn_scalar ** -0.5; Gemma 2 adds
attention and final-logit soft-capping, Gemma 3 per-head q/k norms and a separate RoPE base for its sliding
layers (rope.py builds that second table)."""
from __future__ import annotations

from reference_engine.architectures.dense.gemma import DATA, GEMMA3
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, PositionSettings, Scales,
                                                 Settings, attention_plan, default_windows, mlp_plan, norms_plan,
                                                 raw_float, raw_int)
from reference_engine.errors import UnsupportedError

ARCHITECTURES = DATA.architectures
ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh", "gelu": "gelu"}


def is_gemma3(config: ModelConfig) -> bool:
    return config.architecture == GEMMA3


def settings(config: ModelConfig) -> Settings:
    act = config.raw.get("hidden_activation") or config.raw.get("hidden_act") or "gelu_pytorch_tanh"
    if act not in ACTIVATIONS:
        raise UnsupportedError("config.json", f"hidden_activation {act!r} is not supported for Gemma")
    scalar = raw_float(config, "query_pre_attn_scalar", 256.0)
    gemma3 = is_gemma3(config)
    return Settings(
        family="gemma", norm="rms_plus_one", sandwich=True, activation=ACTIVATIONS[act],
        attention=AttentionSettings(scale=scalar ** -0.5, qk_norm="head" if gemma3 else None,
                                    softcap=raw_float(config, "attn_logit_softcapping", None if gemma3 else 50.0)),
        # transformers keeps sqrt(hidden) as a float32 buffer and casts it to the weight dtype
        scales=Scales(embed=config.hidden_size ** 0.5,
                      final_softcap=raw_float(config, "final_logit_softcapping", None if gemma3 else 30.0)),
        positions=PositionSettings(local_rope=gemma3))


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p = f"model.layers.{n}."
    bias = bool(config.raw.get("attention_bias", False))
    return {**norms_plan(p, config, sandwich=True),
            **attention_plan(p, config, q_bias=bias, o_bias=bias, qk_norm="head" if is_gemma3(config) else None),
            **mlp_plan(p + "mlp.", config.hidden_size, config.intermediate_size)}


def windows(config: ModelConfig) -> list[int | None]:
    """layer_types when given; else Gemma 2 alternates (sliding first), Gemma 3 puts one global layer after
    every `sliding_window_pattern - 1` sliding ones (as transformers' config classes derive them)."""
    window, n = config.sliding_window, config.num_hidden_layers
    if not window or isinstance(config.raw.get("layer_types"), list):
        return default_windows(config)
    if is_gemma3(config):
        pattern = raw_int(config, "sliding_window_pattern", config.raw.get("_sliding_window_pattern", 6))
        return [window if (i + 1) % pattern else None for i in range(n)]
    return [window if (i + 1) % 2 else None for i in range(n)]


FAMILY = Family("gemma", ARCHITECTURES, settings, layer_plan, windows)
