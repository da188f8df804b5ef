"""Llama, Mistral, Qwen2, Qwen3: pre-norm decoder, GQA attention, SwiGLU MLP (the engine's first family)."""
from __future__ import annotations

from reference_engine.architectures.dense.llama import DATA, LLAMA, MISTRAL, QWEN2, QWEN3
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, Settings, attention_plan,
                                                 default_windows, mlp_plan, norms_plan)

ARCHITECTURES = DATA.architectures


def bias_layout(config: ModelConfig) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o_proj bias, MLP bias) as each architecture's transformers class builds them."""
    arch = config.architecture
    if arch == QWEN2:
        return True, False, False
    if arch == MISTRAL:
        return False, False, False
    mlp_bias = arch == LLAMA and bool(config.raw.get("mlp_bias", False))
    return config.attention_bias, config.attention_bias, mlp_bias


def settings(config: ModelConfig) -> Settings:
    return Settings(family="llama", attention=AttentionSettings(qk_norm="head" if config.qk_norm else None))


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p = f"model.layers.{n}."
    qkv_bias, o_bias, mlp_bias = bias_layout(config)
    return {**norms_plan(p, config),
            **attention_plan(p, config, q_bias=qkv_bias, o_bias=o_bias,
                             qk_norm="head" if config.qk_norm else None),
            **mlp_plan(p + "mlp.", config.hidden_size, config.intermediate_size, bias=mlp_bias)}


def windows(config: ModelConfig) -> list[int | None]:
    """Qwen2/Qwen3 without layer_types: the window from layer `max_window_layers` on (as transformers)."""
    window, n = config.sliding_window, config.num_hidden_layers
    if window and not isinstance(config.raw.get("layer_types"), list) and config.architecture in (QWEN2, QWEN3):
        first = config.raw.get("max_window_layers", 28)
        return [window if i >= first else None for i in range(n)]
    return default_windows(config)


FAMILY = Family("llama", ARCHITECTURES, settings, layer_plan, windows)
