"""Falcon-H1 (FalconH1ForCausalLM): every layer runs GQA attention and a Mamba2 mixer side by side on the same
normed input and adds their outputs (mixer kind "attention_mamba2", core/parallel_mixer.py), then a SwiGLU MLP;
muP multipliers everywhere, all data here:

    h   = embed(tokens) * embedding_multiplier
    x   = input_layernorm(h)
    h   = h + mamba2(x * ssm_in_multiplier) * ssm_out_multiplier
            + attention(x * attention_in_multiplier) * attention_out_multiplier
    h   = h + mlp(pre_ff_layernorm(h))        # down(up(x) * silu(gate(x) * mlp_multipliers[0])) * mlp_multipliers[1]
    out = lm_head(final_layernorm(h)) * lm_head_multiplier

Attention scales its keys by key_multiplier (here: the score scale, key_multiplier / sqrt(head_dim), the same
product). The Mamba2 mixer's in_proj output is multiplied segment by segment by ssm_multipliers (z, x, B, C, dt);
its inner size is mamba_d_ssm (mamba_expand x hidden_size when null); its output is y * silu(z), normed first when
mamba_rms_norm (grouped RMSNorm, before the gate when mamba_norm_before_gate, else after it). out_proj has a
bias when projectors_bias, in_proj when mamba_proj_bias. Each layer keeps K/V per token and a Mamba2 state per
sequence (ParallelLayout).
"""
from __future__ import annotations

import math
from dataclasses import replace

from reference_engine.architectures.hybrid.falcon_h1 import DATA, SSM_SEGMENTS, multipliers, ssm_inner
from reference_engine.architectures.hybrid.falcon_h1 import multiplier as read_multiplier
from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import KVLayout, LayerCache, ParallelLayout
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, MambaDims, ParallelScales,
                                                 Scales, Settings, attention_plan, mlp_plan)
from reference_engine.core.families.hybrid.mamba import mamba_dims, mamba_plan, state_layout
from reference_engine.errors import ModelDirError

ARCHITECTURES = DATA.architectures
KIND = "attention_mamba2"


def multiplier(config: ModelConfig, key: str) -> float:
    return read_multiplier(config.raw, key)


def falcon_mamba_dims(config: ModelConfig) -> MambaDims:
    rms_norm, before = bool(config.raw.get("mamba_rms_norm", False)), config.raw.get("mamba_norm_before_gate", True)
    scales = multipliers(config.raw, "ssm_multipliers", len(SSM_SEGMENTS))
    return replace(mamba_dims(config, ssm_inner(config.raw)),
                   norm=("norm_gate" if before else "gated") if rms_norm else "gate",
                   scales=None if all(s == 1.0 for s in scales) else scales)


def settings(config: ModelConfig) -> Settings:
    key, embed, head = (multiplier(config, k) for k in ("key_multiplier", "embedding_multiplier",
                                                         "lm_head_multiplier"))
    if head == 0.0:
        raise ModelDirError("config.json", "'lm_head_multiplier' is 0: every logit would be 0")
    mlp = multipliers(config.raw, "mlp_multipliers", 2)
    return Settings(family="falcon_h1", final_norm="model.final_layernorm.weight",
                    attention=AttentionSettings(scale=None if key == 1.0 else key / math.sqrt(config.head_dim)),
                    scales=Scales(embed=None if embed == 1.0 else embed, mlp=None if mlp == (1.0, 1.0) else mlp,
                                  logits_divisor=None if head == 1.0 else 1.0 / head),
                    parallel=ParallelScales(*(multiplier(config, k) for k in (
                        "attention_in_multiplier", "attention_out_multiplier", "ssm_in_multiplier",
                        "ssm_out_multiplier"))),
                    mamba=falcon_mamba_dims(config))


def mixers(config: ModelConfig) -> list[str]:
    return [KIND] * config.num_hidden_layers


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h, dims = f"model.layers.{n}.", config.hidden_size, falcon_mamba_dims(config)
    m = p + "mamba."
    plan = {k: v for k, v in mamba_plan(m, config, dims).items() if k not in ("ssm_norm", "ssm_out_bias")}
    if dims.norm != "gate":
        plan["ssm_norm"] = [(m + "norm.weight", (dims.inner,))]
    if config.raw.get("projectors_bias", False):
        plan["ssm_out_bias"] = [(m + "out_proj.bias", (h,))]
    return {"input_norm": [(p + "input_layernorm.weight", (h,))],
            "post_norm": [(p + "pre_ff_layernorm.weight", (h,))],
            **attention_plan(p, config, q_bias=config.attention_bias, o_bias=config.attention_bias),
            **mlp_plan(p + "feed_forward.", h, config.intermediate_size,
                       bias=bool(config.raw.get("mlp_bias", False))),
            **plan}


def cache_layout(config: ModelConfig) -> list[LayerCache]:
    state = state_layout(falcon_mamba_dims(config))
    both = ParallelLayout(KVLayout(config.num_key_value_heads, config.head_dim, config.head_dim), state)
    return [both] * config.num_hidden_layers


FAMILY = Family("falcon_h1", ARCHITECTURES, settings, layer_plan, mixers=mixers, cache_layout=cache_layout)
