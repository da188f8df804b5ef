"""The mixture-of-experts MLP: route each token to its top-k experts and run every expert only on its tokens.

Routing is transformers' (Mixtral/Qwen2-MoE/Qwen3-MoE/OLMoE TopKRouter): router logits in the model dtype,
softmax in float32, top-k, renormalised when `norm_topk_prob` (always for Mixtral), weights cast back to the
model dtype (not for Mixtral); gpt-oss (`topk_then_softmax`) takes the top-k router logits (router bias
included) and softmaxes only those. Experts run in ascending order and their weighted outputs are
index_add-ed into a zero tensor, as transformers does, so float32 results agree to rounding. An expert is
the gated MLP (`experts_gate_up`/`experts_down`), or gpt-oss's clamped SwiGLU over transformers' fused,
biased layout (core/clamped_swiglu.py) when MoESettings.swiglu_limit is set.
"""
from __future__ import annotations

import torch

from reference_engine.core.clamped_swiglu import fused_expert
from reference_engine.core.families.base import MoESettings


def route(router_logits: torch.Tensor, moe: MoESettings) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits [T, experts] -> (weights [T, top_k], expert ids [T, top_k])."""
    if moe.topk_then_softmax:                                     # gpt-oss: softmax over the k chosen logits
        top, ids = torch.topk(router_logits, moe.top_k, dim=-1)
        return torch.softmax(top, dim=-1), ids
    probs = torch.softmax(router_logits.float(), dim=-1)
    top, ids = torch.topk(probs, moe.top_k, dim=-1)
    if moe.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    return (top.to(router_logits.dtype) if moe.cast_weights else top), ids


def moe_mlp(x: torch.Tensor, w, moe: MoESettings, act, linear, on_router=None) -> torch.Tensor:
    """x [T, hidden] -> [T, hidden]. `on_router(logits [T, experts])` may replace the router logits (the
    "router" capture point: routing statistics, fault injection)."""
    logits = linear(x, w.router, w.extra.get("router_bias"))     # [T, experts]
    if on_router is not None:
        logits = on_router(logits)
    weights, ids = route(logits, moe)
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():                          # only the experts some token chose
        pos, tok = torch.where(ids.T == e)                        # ([n], [n]): slot in top-k, token
        y = expert(x[tok], w, e, moe, act, linear) * weights[tok, pos, None]
        out.index_add_(0, tok, y.to(out.dtype))
    if w.shared_gate_up is not None:                              # Qwen2-MoE: a dense expert for every token
        gate, up = linear(x, w.shared_gate_up).chunk(2, dim=-1)
        shared = linear(act(gate) * up, w.shared_down)
        out = out + torch.sigmoid(linear(x, w.shared_gate)) * shared
    return out


def expert(x: torch.Tensor, w, e: int, moe: MoESettings, act, linear) -> torch.Tensor:
    """Expert e on its tokens x [n, hidden] -> [n, hidden]."""
    if moe.swiglu_limit is not None:                              # gpt-oss: fused, biased, clamped SwiGLU
        return fused_expert(x, w, e, moe.swiglu_limit, moe.swiglu_alpha)
    gate, up = linear(x, w.experts_gate_up[e]).chunk(2, dim=-1)
    return linear(act(gate) * up, w.experts_down[e])
