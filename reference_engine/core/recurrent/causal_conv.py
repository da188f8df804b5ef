"""Causal depthwise 1-D convolution with a carried window: the short convolution of LFM2, Mamba2 and Gated
DeltaNet, for one sequence at a time.

Prefill and decode run the same function: the window holds the last K-1 inputs the sequence has seen (zeros for
a fresh sequence), is put in front of the new tokens, and the convolution runs without padding over the whole run,
so a chunked prefill, a token-by-token decode and a one-shot prefill see exactly the same inputs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, C] new inputs, weight [C, K] (one filter per channel), bias [C] | None, window [C, K-1] the inputs
    before x -> (y [T, C], the window after x [C, K-1]). Computed in x's dtype; the window is kept as given."""
    channels, kernel = weight.shape
    seq = torch.cat([window.to(x.dtype), x.T], dim=1)                    # [C, K-1+T]
    y = F.conv1d(seq[None], weight[:, None, :].to(x.dtype), None if bias is None else bias.to(x.dtype),
                 groups=channels)[0]                                      # [C, T]
    new_window = seq[:, seq.shape[1] - (kernel - 1):] if kernel > 1 else seq[:, :0]
    return y.T, new_window.to(window.dtype)
