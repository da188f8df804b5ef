"""OLMo 2 and OLMo 3: post-norm decoders. No norm opens a branch; `post_attention_layernorm` closes the attention
branch and `post_feedforward_layernorm` the MLP, each before its residual add. q and k are RMS-normed over the
whole projections (all heads at once) before RoPE. OLMo 3 adds sliding-window layers (`layer_types`; three
sliding to one full by default) with a RoPE block per layer kind (transformers 5's rope_parameters; an older flat
rope_scaling is the full layers' only), the full layers' scaling (YaRN in the long-context checkpoints) not
applied to the sliding ones."""
from __future__ import annotations

from reference_engine.architectures.dense.olmo import DATA, OLMO3
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (AttentionSettings, Family, LAYER_KINDS, LayerPlan, PositionSettings,
                                                 Settings, attention_plan, default_windows, mlp_plan)

ARCHITECTURES = DATA.architectures


def per_kind_rope(config: ModelConfig) -> bool:
    params = config.raw.get("rope_parameters")
    return isinstance(params, dict) and any(k in params for k in LAYER_KINDS)


def settings(config: ModelConfig) -> Settings:
    """OLMo 3 with a flat (pre-transformers-5) rope_scaling: transformers puts it on the full layers only and
    gives the sliding ones plain RoPE on the same base; a per-kind rope_parameters says so itself."""
    flat_scaled = config.architecture == OLMO3 and not per_kind_rope(config) and bool(config.rope_scaling)
    return Settings(family="olmo", post_norms=True, attention=AttentionSettings(qk_norm="full"),
                    positions=PositionSettings(local_rope=per_kind_rope(config) or flat_scaled,
                                               local_rope_plain=flat_scaled))


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h, bias = f"model.layers.{n}.", config.hidden_size, config.attention_bias
    return {"post_norm": [(p + "post_attention_layernorm.weight", (h,))],
            "post_ff_norm": [(p + "post_feedforward_layernorm.weight", (h,))],
            **attention_plan(p, config, q_bias=bias, o_bias=bias, qk_norm="full"),
            **mlp_plan(p + "mlp.", h, config.intermediate_size)}


def windows(config: ModelConfig) -> list[int | None]:
    """OLMo 3 without layer_types: every 4th layer full, the others sliding (Olmo3Config's default)."""
    window, n = config.sliding_window, config.num_hidden_layers
    if config.architecture != OLMO3:
        return [None] * n
    if window and not isinstance(config.raw.get("layer_types"), list):
        return [window if (i + 1) % 4 else None for i in range(n)]
    return default_windows(config)


FAMILY = Family("olmo", ARCHITECTURES, settings, layer_plan, windows)
