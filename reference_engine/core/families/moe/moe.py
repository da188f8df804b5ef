"""Mixture-of-experts decoders: Mixtral, Qwen2-MoE (with a gated shared expert), Qwen3-MoE, OLMoE.

Attention is the Llama one (with each family's biases and q/k norms); the MLP is a router (softmax in float32,
top-k, optionally renormalised) over gated experts, computed only for the tokens routed to them
(reference_engine/core/moe.py). Hub checkpoints store one tensor per expert; the loader stacks them into
[num_experts, ...] tensors.
"""
from __future__ import annotations

from reference_engine.architectures.moe.moe import DATA, MIXTRAL, OLMOE, QWEN2_MOE, QWEN3_MOE
from reference_engine.config import ModelConfig
from reference_engine.core.families.base import (AttentionSettings, Family, LayerPlan, MoESettings, Settings,
                                                 attention_plan, mlp_plan, norms_plan, raw_float, raw_int)
from reference_engine.errors import ModelDirError

ARCHITECTURES = DATA.architectures
QWEN = (QWEN2_MOE, QWEN3_MOE)


def num_experts(config: ModelConfig) -> int:
    key = "num_experts" if config.raw.get("num_experts") is not None else "num_local_experts"
    return raw_int(config, key, 0)


def sparse_layers(config: ModelConfig) -> frozenset:
    """Qwen MoE: layers listed in mlp_only_layers, or off the decoder_sparse_step grid, run a dense MLP."""
    n = config.num_hidden_layers
    if config.architecture not in QWEN:
        return frozenset(range(n))
    step = raw_int(config, "decoder_sparse_step", 1) or 1
    dense = config.raw.get("mlp_only_layers") or []
    return frozenset(i for i in range(n) if i not in dense and (i + 1) % step == 0 and num_experts(config) > 0)


def settings(config: ModelConfig) -> Settings:
    arch, experts = config.architecture, num_experts(config)
    top_k = raw_int(config, "num_experts_per_tok", 2)
    if experts < 1 or not 1 <= top_k <= experts:
        raise ModelDirError("config.json", f"num_experts_per_tok {top_k} must be between 1 and the number of "
                                           f"experts ({experts})")
    mixtral = arch == MIXTRAL
    moe = MoESettings(num_experts=experts, top_k=top_k,
                      norm_topk_prob=True if mixtral else bool(config.raw.get("norm_topk_prob", False)),
                      cast_weights=not mixtral, shared_expert=arch == QWEN2_MOE,
                      sparse_layers=sparse_layers(config))
    qk_norm = {QWEN3_MOE: "head", OLMOE: "full"}.get(arch)
    clip = raw_float(config, "clip_qkv", None) if arch == OLMOE else None
    return Settings(family="moe", attention=AttentionSettings(qk_norm=qk_norm, clip_qkv=clip), moe=moe)


def expert_names(arch: str, prefix: str) -> tuple[str, str, str, str]:
    """(router, gate, up, down) name patterns; {e} is the expert index."""
    if arch == MIXTRAL:
        b = prefix + "block_sparse_moe."
        return b + "gate.weight", b + "experts.{e}.w1.weight", b + "experts.{e}.w3.weight", b + "experts.{e}.w2.weight"
    m = prefix + "mlp."
    return m + "gate.weight", m + "experts.{e}.gate_proj.weight", m + "experts.{e}.up_proj.weight", \
        m + "experts.{e}.down_proj.weight"


def expert_size(config: ModelConfig) -> int:
    if config.architecture in QWEN:
        return raw_int(config, "moe_intermediate_size", config.intermediate_size)
    return config.intermediate_size


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    p, arch, h = f"model.layers.{n}.", config.architecture, config.hidden_size
    bias = bool(config.raw.get("qkv_bias", True)) if arch == QWEN2_MOE else config.attention_bias
    o_bias = config.attention_bias and arch != QWEN2_MOE
    qk_norm = {QWEN3_MOE: "head", OLMOE: "full"}.get(arch)
    plan = {**norms_plan(p, config), **attention_plan(p, config, q_bias=bias, o_bias=o_bias, qk_norm=qk_norm)}
    if n not in sparse_layers(config):
        return {**plan, **mlp_plan(p + "mlp.", h, config.intermediate_size)}
    router, gate, up, down = expert_names(arch, p)
    size, experts = expert_size(config), range(num_experts(config))
    plan["router"] = [(router, (num_experts(config), h))]
    plan["experts_gate_up"] = [[(gate.format(e=e), (size, h)), (up.format(e=e), (size, h))] for e in experts]
    plan["experts_down"] = [[(down.format(e=e), (h, size))] for e in experts]
    if arch == QWEN2_MOE:
        shared = raw_int(config, "shared_expert_intermediate_size", 0)
        shared_plan = mlp_plan(p + "mlp.shared_expert.", h, shared)
        plan["shared_gate_up"], plan["shared_down"] = shared_plan["gate_up"], shared_plan["down"]
        plan["shared_gate"] = [(p + "mlp.shared_expert_gate.weight", (1, h))]
    return plan


FAMILY = Family("moe", ARCHITECTURES, settings, layer_plan)
