"""MiniMax-M2: every layer a sparse MoE (no dense layers, no shared expert, no sliding window: transformers runs
none of these, whatever `shared_intermediate_size`, `sliding_window` or `attn_type_list` in a hub config say;
CFG034 reports such fields). Attention RMS-norms q and k over the whole projections before RoPE, and only the
first `rotary_dim` features of each head rotate (partial rotary, rope.py). The router is sigmoid with a
per-expert `e_score_correction_bias` that picks the top-k without weighing them (core/moe.py "noaux_tc" with one group);
experts are Mixtral's w1 (gate), w3 (up), w2 (down) under `block_sparse_moe`."""
from __future__ import annotations

from reference_engine.architectures.moe.minimax import DATA
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, MoESettings, Settings,
                                                 attention_plan, norms_plan, raw_int)
from reference_engine.errors import ModelDirError

ARCHITECTURES = DATA.architectures


def num_experts(config: ModelConfig) -> int:
    return raw_int(config, "num_local_experts" if "num_local_experts" in config.raw else "num_experts", 0)


def settings(config: ModelConfig) -> Settings:
    experts, top_k = num_experts(config), raw_int(config, "num_experts_per_tok", 8)
    if experts < 1 or not 1 <= top_k <= experts:
        raise ModelDirError("config.json", f"num_experts_per_tok {top_k} must be between 1 and the number of "
                                           f"experts ({experts})")
    moe = MoESettings(num_experts=experts, top_k=top_k, norm_topk_prob=True, cast_weights=False,
                      sparse_layers=frozenset(range(config.num_hidden_layers)), method="noaux_tc")
    return Settings(family="minimax", attention=AttentionSettings(qk_norm="full"), moe=moe)


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, h, inter, experts = f"model.layers.{n}.", config.hidden_size, config.intermediate_size, num_experts(config)
    b = p + "block_sparse_moe."
    return {**norms_plan(p, config), **attention_plan(p, config, qk_norm="full"),
            "router": [(b + "gate.weight", (experts, h))],
            "e_score_correction_bias": [(b + "e_score_correction_bias", (experts,))],
            "experts_gate_up": [[(b + f"experts.{e}.w1.weight", (inter, h)), (b + f"experts.{e}.w3.weight", (inter, h))]
                                for e in range(experts)],
            "experts_down": [[(b + f"experts.{e}.w2.weight", (h, inter))] for e in range(experts)]}


def windows(config: ModelConfig) -> list[None]:
    return [None] * config.num_hidden_layers


FAMILY = Family("minimax", ARCHITECTURES, settings, layer_plan, windows)
