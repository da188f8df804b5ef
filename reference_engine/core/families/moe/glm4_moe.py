"""GLM-4.5 / GLM-4.6 (Glm4MoeForCausalLM): DeepSeek-V3's shared-experts MoE (families/mla/deepseek.py) under GQA
attention: q/k/v biases (`attention_bias`), optional per-head q/k RMSNorm (`use_qk_norm`), partial rotary
(`partial_rotary_factor`, 0.5 when absent, as Glm4MoeConfig: architectures/moe/glm4_moe.py), noaux_tc routing plus
shared experts, dense MLPs before `first_k_dense_replace`.
"""
from __future__ import annotations

from reference_engine.architectures.moe.glm4_moe import DATA
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, Settings, attention_plan,
                                                 norms_plan)
from reference_engine.core.families.mla.deepseek import moe_settings, shared_moe_plan


def qk_norm(config: ModelConfig) -> str | None:
    return "head" if config.raw.get("use_qk_norm", False) else None


def settings(config: ModelConfig) -> Settings:
    return Settings(family="glm4_moe", attention=AttentionSettings(qk_norm=qk_norm(config)),
                    moe=moe_settings(config, "noaux_tc", bool(config.raw.get("norm_topk_prob", True))))


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p = f"model.layers.{n}."
    return {**norms_plan(p, config), **attention_plan(p, config, q_bias=config.attention_bias, qk_norm=qk_norm(config)),
            **shared_moe_plan(p, config, n, router_bias=True)}


FAMILY = Family("glm4_moe", DATA.architectures, settings, layer_plan)
