"""A layer whose token mixer is attention and a Mamba2 mixer side by side (Falcon-H1, kind "attention_mamba2").

Both branches read the same normed input, each with its own multipliers (Settings.parallel), and their outputs
are summed before the residual add:

    a   = attention(x * attn_in) * attn_out          # GQA over the paged K/V of this layer
    m   = mamba2(x * ssm_in) * ssm_out                # the Mamba2 mixer (recurrent/mamba2.py), its state per sequence
    out = m + a                                       # [T, hidden]

The layer keeps both kinds of cache (core/cache/layout.ParallelLayout): K/V per token, a state per sequence.
The branch functions are passed in (model.MIXERS binds them), so this module imports no other mixer.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from reference_engine.core import families
from reference_engine.core.layers.step import LayerStep


def parallel_block(x: torch.Tensor, w, config, step: LayerStep, *, attention: Callable,
                   ssm: Callable) -> torch.Tensor:
    """x [T, hidden] (normed) -> attention and the recurrent mixer on x, scaled and summed [T, hidden]."""
    p = families.settings(config).parallel
    m = ssm(x * p.ssm_in, w, config, step) * p.ssm_out
    a = attention(x * p.attn_in, w, config, step) * p.attn_out
    return m + a
