"""The mixture-of-experts MLP: route each token to its top-k experts and run every expert only on its tokens.

Routing is data (`MoESettings.routing`, one function per kind in `ROUTERS`), each as its transformers router:
- "softmax" (Mixtral/Qwen2-MoE/Qwen3-MoE/OLMoE TopKRouter): router logits in the model dtype, softmax in float32,
  top-k, renormalised when `norm_topk_prob` (always for Mixtral), weights cast back to the model dtype (not for
  Mixtral);
- "sigmoid_bias" (MiniMax-M2): sigmoid of the logits in float32; the per-expert `e_score_correction_bias` is added
  only to pick the top-k, the unbiased sigmoid scores weigh them, renormalised;
- "sigmoid_topk" (Llama 4): top-k of the raw logits, the sigmoid of the chosen ones is the weight (no
  renormalisation) and, with `scale_input`, multiplies the expert's input instead of its output.
Experts run in ascending order and their weighted outputs are index_add-ed into a zero tensor, as transformers
does, so float32 results agree to rounding. Llama 4 stores its experts fused and transposed ([E, hidden,
2 * inter], [E, inter, hidden] in `extra["experts_gate_up_in"]`, `extra["experts_down_in"]`); `expert` hands
out [out, in] views of either layout.
"""
from __future__ import annotations

import torch

from reference_engine.core.families.base import MoESettings


def softmax_route(logits: torch.Tensor, moe: MoESettings, bias=None) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)
    top, ids = torch.topk(probs, moe.top_k, dim=-1)
    if moe.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    return (top.to(logits.dtype) if moe.cast_weights else top), ids


def sigmoid_bias_route(logits: torch.Tensor, moe: MoESettings, bias=None) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.sigmoid(logits.float())                           # [T, experts]
    choice = scores if bias is None else scores + bias.float()        # the bias picks, it never weighs
    ids = torch.topk(choice, moe.top_k, dim=-1, sorted=False).indices
    top = scores.gather(1, ids)
    if moe.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    return (top.to(logits.dtype) if moe.cast_weights else top), ids


def sigmoid_topk_route(logits: torch.Tensor, moe: MoESettings, bias=None) -> tuple[torch.Tensor, torch.Tensor]:
    top, ids = torch.topk(logits, moe.top_k, dim=-1)
    return torch.sigmoid(top.float()).to(logits.dtype), ids


ROUTERS = {"softmax": softmax_route, "sigmoid_bias": sigmoid_bias_route, "sigmoid_topk": sigmoid_topk_route}


def route(router_logits: torch.Tensor, moe: MoESettings, bias: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits [T, experts] -> (weights [T, top_k], expert ids [T, top_k])."""
    return ROUTERS[moe.routing](router_logits, moe, bias)


def expert(w, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert e's (gate_up [2 * inter, hidden], down [hidden, inter]) as F.linear weights."""
    if w.experts_gate_up is not None:
        return w.experts_gate_up[e], w.experts_down[e]
    return w.extra["experts_gate_up_in"][e].T, w.extra["experts_down_in"][e].T


def moe_mlp(x: torch.Tensor, w, moe: MoESettings, act, linear, on_router=None) -> torch.Tensor:
    """x [T, hidden] -> [T, hidden]. `on_router(logits [T, experts])` may replace the router logits (the
    "router" capture point: routing statistics, fault injection)."""
    logits = linear(x, w.router)                                  # [T, experts]
    if on_router is not None:
        logits = on_router(logits)
    weights, ids = route(logits, moe, w.extra.get("e_score_correction_bias"))
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():                          # only the experts some token chose
        pos, tok = torch.where(ids.T == e)                        # ([n], [n]): slot in top-k, token
        gate_up, down = expert(w, e)
        scale = weights[tok, pos, None]                           # [n, 1]
        inp = (x[tok] * scale).to(x.dtype) if moe.scale_input else x[tok]
        gate, up = linear(inp, gate_up).chunk(2, dim=-1)
        y = linear(act(gate) * up, down)
        out.index_add_(0, tok, (y if moe.scale_input else y * scale).to(out.dtype))
    if w.shared_gate_up is not None:                              # Qwen2-MoE, Llama 4: a dense expert for every token
        gate, up = linear(x, w.shared_gate_up).chunk(2, dim=-1)
        shared = linear(act(gate) * up, w.shared_down)
        out = out + (shared if w.shared_gate is None else torch.sigmoid(linear(x, w.shared_gate)) * shared)
    return out
