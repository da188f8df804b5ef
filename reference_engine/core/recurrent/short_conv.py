"""LFM2's short convolution mixer ("short_conv"): a gated causal depthwise convolution over each sequence.

    B, C, x = in_proj(h)                 # [T, hidden] each
    y       = C * conv(B * x)            # conv: depthwise, conv_L_cache taps, causal, over the sequence so far
    out     = out_proj(y)

The convolution carries the last K-1 values of B * x per sequence (the layer's recurrent state, core/cache:
StateLayout "conv" [hidden, K-1]); a chunked prefill, a token-by-token decode and a one-shot prefill therefore
see the same inputs (core/recurrent/causal_conv.py). Tokens arrive packed; each sequence's run is taken from
`meta.seq_ids/counts`, so no token of one sequence (nor any padding) reaches another's window.
"""
from __future__ import annotations

import torch

from reference_engine.core.layers.step import LayerStep
from reference_engine.core.recurrent.causal_conv import causal_conv


def short_conv_block(x: torch.Tensor, w, config, step: LayerStep) -> torch.Tensor:
    """x [T, hidden] (normed) -> [T, hidden]; stages each sequence's new conv window."""
    e, layer, cache, meta, linear = w.extra, step.layer, step.cache, step.meta, step.linear
    b, c, v = linear(x, e["conv_in"], e.get("conv_in_bias")).chunk(3, dim=-1)    # [T, hidden] each
    bx = b * v
    weight = e["conv_weight"][:, 0, :]                                            # [hidden, K]
    runs, at = [], 0
    for seq, n in zip(meta.seq_ids, meta.counts):
        state = cache.states.get(layer, seq)
        y, new_window = causal_conv(bx[at:at + n], weight, e.get("conv_bias"), state["conv"])   # [n, hidden]
        cache.states.stage(layer, seq, {"conv": new_window})
        runs.append(y)
        at += n
    y = torch.cat(runs) if len(runs) > 1 else runs[0]                             # [T, hidden]
    return linear(c * y, e["conv_out"], e.get("conv_out_bias"))
