"""gpt-oss experts: a clamped SwiGLU over interleaved gate/up columns, with biases, in transformers' fused layout.

Stored per layer (transformers GptOssExperts; an MXFP4 checkpoint dequantizes to the same tensors):
    gate_up_proj       [experts, hidden, 2 * inter]   columns interleaved: gate 0, up 0, gate 1, up 1, ...
    gate_up_proj_bias  [experts, 2 * inter]
    down_proj          [experts, inter, hidden]
    down_proj_bias     [experts, hidden]

    gate = min(gate, limit);  up = clamp(up, -limit, limit)
    y    = ((up + 1) * gate * sigmoid(alpha * gate)) @ down + down_bias

The `+ 1` on up and the clamp are part of the trained function: leaving either out (or a limit of 0) gives
wrong logits with no error anywhere.
"""
from __future__ import annotations

import torch

from reference_engine.core.families.base import FUSED_DOWN, FUSED_DOWN_BIAS, FUSED_GATE_UP, FUSED_GATE_UP_BIAS


def clamped_swiglu(gate_up: torch.Tensor, limit: float, alpha: float) -> torch.Tensor:
    """gate_up [n, 2 * inter] (interleaved) -> [n, inter]."""
    gate, up = gate_up[..., ::2], gate_up[..., 1::2]
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


def fused_expert(x: torch.Tensor, w, e: int, limit: float, alpha: float) -> torch.Tensor:
    """Expert e on its tokens x [n, hidden] -> [n, hidden]."""
    gate_up = x @ w.extra[FUSED_GATE_UP][e] + w.extra[FUSED_GATE_UP_BIAS][e]          # [n, 2 * inter]
    return clamped_swiglu(gate_up, limit, alpha) @ w.extra[FUSED_DOWN][e] + w.extra[FUSED_DOWN_BIAS][e]
