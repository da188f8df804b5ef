"""The mixture-of-experts MLP: route each token to its top-k experts and run every expert only on its tokens.

Routing is transformers', one function per method (`MoESettings.method`, read from the family's settings):
- "softmax_topk" (Mixtral/Qwen2-MoE/Qwen3-MoE/OLMoE TopKRouter, DeepSeek-V2 "greedy"): router logits in the
  model dtype, softmax in float32, top-k, renormalised when `norm_topk_prob` (always for Mixtral), weights cast
  back to the model dtype (not for Mixtral);
- "group_limited_greedy" (DeepSeek-V2): softmax; the experts split into `n_group` groups, each ranked by its best
  expert; only the `topk_group` best groups compete for the top-k;
- "noaux_tc" (DeepSeek-V3, Kimi K2, GLM-4.5; MiniMax-M2 is its one-group case): sigmoid scores;
  `e_score_correction_bias` added for the choice only (groups ranked by the sum of their two best biased scores),
  the weights are the unbiased scores, renormalised when `norm_topk_prob` (+1e-20);
- "sigmoid_topk" (Llama 4): top-k of the raw logits, the sigmoid of the chosen ones is the weight (no
  renormalisation) and, with `scale_input`, multiplies the expert's input instead of its output;
- "topk_softmax" (gpt-oss): top-k of the router logits (its linear bias included), softmaxed among themselves.
Every method then multiplies by `routed_scaling_factor`. Experts run in ascending order and their weighted
outputs are index_add-ed into a zero tensor, as transformers does, so float32 results agree to rounding.
Llama 4 stores its experts fused and transposed ([E, hidden, 2 * inter], [E, inter, hidden] in
`extra["experts_gate_up_in"]`, `extra["experts_down_in"]`); `expert` hands out [out, in] views of either layout.
gpt-oss's experts are the clamped SwiGLU over transformers' fused, biased layout (core/clamped_swiglu.py), run
when MoESettings.swiglu_limit is set.
"""
from __future__ import annotations

import torch

from reference_engine.core.clamped_swiglu import fused_expert
from reference_engine.core.families.base import MoESettings


def softmax_topk(logits: torch.Tensor, moe: MoESettings, bias) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)
    top, ids = torch.topk(probs, moe.top_k, dim=-1)
    if moe.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    return top, ids


def group_mask(choice: torch.Tensor, group_scores: torch.Tensor, moe: MoESettings) -> torch.Tensor:
    """[T, experts] bool: the experts of each token's topk_group best groups (group_scores [T, n_group])."""
    best = torch.topk(group_scores, k=moe.topk_group, dim=-1, sorted=False)[1]          # [T, topk_group]
    groups = torch.zeros_like(group_scores).scatter_(1, best, 1).bool()                 # [T, n_group]
    return groups.repeat_interleave(choice.shape[-1] // moe.n_group, dim=-1)            # [T, experts]


def group_limited_greedy(logits: torch.Tensor, moe: MoESettings, bias) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)                                       # [T, experts]
    per_group = probs.view(probs.shape[0], moe.n_group, -1).max(dim=-1).values          # [T, n_group]
    probs = probs.masked_fill(~group_mask(probs, per_group, moe), 0.0)
    return torch.topk(probs, moe.top_k, dim=-1, sorted=False)


def noaux_tc(logits: torch.Tensor, moe: MoESettings, bias) -> tuple[torch.Tensor, torch.Tensor]:
    scores = logits.float().sigmoid()                                                   # [T, experts]
    choice = scores if bias is None else scores + bias.float()
    per_group = choice.view(choice.shape[0], moe.n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)   # [T, n_group]
    choice = choice.masked_fill(~group_mask(choice, per_group, moe), float("-inf"))
    ids = torch.topk(choice, k=moe.top_k, dim=-1, sorted=False)[1]                      # [T, top_k]
    top = scores.gather(1, ids)
    if moe.norm_topk_prob:
        top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)
    return top, ids


def sigmoid_topk(logits: torch.Tensor, moe: MoESettings, bias) -> tuple[torch.Tensor, torch.Tensor]:
    top, ids = torch.topk(logits, moe.top_k, dim=-1)
    return torch.sigmoid(top.float()), ids


def topk_softmax(logits: torch.Tensor, moe: MoESettings, bias) -> tuple[torch.Tensor, torch.Tensor]:
    top, ids = torch.topk(logits, moe.top_k, dim=-1)
    return torch.softmax(top, dim=-1), ids


ROUTERS = {"softmax_topk": softmax_topk, "group_limited_greedy": group_limited_greedy, "noaux_tc": noaux_tc,
           "sigmoid_topk": sigmoid_topk, "topk_softmax": topk_softmax}


def route(router_logits: torch.Tensor, moe: MoESettings,
          bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits [T, experts] (bias [experts]: e_score_correction_bias) -> (weights [T, top_k], ids [T, top_k])."""
    top, ids = ROUTERS[moe.method](router_logits, moe, bias)
    if moe.routed_scaling != 1.0:
        top = top * moe.routed_scaling
    return (top.to(router_logits.dtype) if moe.cast_weights else top), ids


def expert(w, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert e's (gate_up [2 * inter, hidden], down [hidden, inter]) as F.linear weights."""
    if w.experts_gate_up is not None:
        return w.experts_gate_up[e], w.experts_down[e]
    return w.extra["experts_gate_up_in"][e].T, w.extra["experts_down_in"][e].T


def moe_mlp(x: torch.Tensor, w, moe: MoESettings, act, linear, on_router=None) -> torch.Tensor:
    """x [T, hidden] -> [T, hidden]. `on_router(logits [T, experts])` may replace the router logits (the
    "router" capture point: routing statistics, fault injection)."""
    if moe.router_fp32:                                           # DeepSeek/GLM: the gate runs in float32
        logits = linear(x.float(), w.router.float())              # [T, experts]
    else:
        logits = linear(x, w.router, w.extra.get("router_bias"))  # gpt-oss: a biased router
    if on_router is not None:
        logits = on_router(logits)
    weights, ids = route(logits, moe, w.extra.get("e_score_correction_bias"))
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():                          # only the experts some token chose
        pos, tok = torch.where(ids.T == e)                        # ([n], [n]): slot in top-k, token
        scale = weights[tok, pos, None]                           # [n, 1]
        if moe.swiglu_limit is not None:                          # gpt-oss: fused, biased, clamped SwiGLU
            y = fused_expert(x[tok], w, e, moe.swiglu_limit, moe.swiglu_alpha) * scale
            out.index_add_(0, tok, y.to(out.dtype))
            continue
        gate_up, down = expert(w, e)
        inp = (x[tok] * scale).to(x.dtype) if moe.scale_input else x[tok]
        gate, up = linear(inp, gate_up).chunk(2, dim=-1)
        y = linear(act(gate) * up, down)
        out.index_add_(0, tok, (y if moe.scale_input else y * scale).to(out.dtype))
    if w.shared_gate_up is not None:                              # a dense expert for every token
        gate, up = linear(x, w.shared_gate_up, w.extra.get("shared_gate_up_bias")).chunk(2, dim=-1)
        shared = linear(act(gate) * up, w.shared_down, w.extra.get("shared_down_bias"))
        # Qwen2-MoE scales it by sigmoid(shared_expert_gate); DeepSeek/GLM/Llama 4 add it as is
        out = out + (shared if w.shared_gate is None else torch.sigmoid(linear(x, w.shared_gate)) * shared)
    return out
