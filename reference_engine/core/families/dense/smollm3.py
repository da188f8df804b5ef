"""SmolLM3: Llama with NoPE layers. `no_rope_layers[i]` is 1 where layer i rotates q/k and 0 where it does not
(every 4th layer by default): those layers see position only through the causal mask. Optional sliding windows
go to the NoPE layers when `use_sliding_window` is set and `layer_types` is absent (as its config derives them)."""
from __future__ import annotations

from reference_engine.architectures.dense.smollm3 import DATA
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (Family, LayerPlan, PositionSettings, Settings, attention_plan,
                                                 default_windows, mlp_plan, nope_layers, norms_plan)

ARCHITECTURES = DATA.architectures


def settings(config: ModelConfig) -> Settings:
    return Settings(family="smollm3", positions=PositionSettings(nope_layers=nope_layers(config)))


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, bias = f"model.layers.{n}.", config.attention_bias
    return {**norms_plan(p, config), **attention_plan(p, config, q_bias=bias, o_bias=bias),
            **mlp_plan(p + "mlp.", config.hidden_size, config.intermediate_size,
                       bias=bool(config.raw.get("mlp_bias")))}


def windows(config: ModelConfig) -> list[int | None]:
    window = config.sliding_window
    if window and not isinstance(config.raw.get("layer_types"), list):
        nope = nope_layers(config)
        return [window if i in nope else None for i in range(config.num_hidden_layers)]
    return default_windows(config)


FAMILY = Family("smollm3", ARCHITECTURES, settings, layer_plan, windows)
