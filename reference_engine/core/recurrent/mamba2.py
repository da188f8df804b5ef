"""The Mamba2 mixer ("mamba2", Granite 4 / Falcon-H1 style) over each sequence's packed tokens.

    z, xBC, dt = in_proj(h)                          # [T, inner], [T, inner + 2 G N], [T, heads]
    xBC        = silu(conv(xBC))                     # causal depthwise conv, mamba_d_conv taps, carried window
    x, B, C    = split(xBC)                          # [T, heads, head_dim], [T, G, N] x 2 (G groups share B, C)
    dt         = clamp(softplus(dt + dt_bias), time_step_limit)
    A          = -exp(A_log)                          # [heads] < 0: the decay exp(dt A) is in (0, 1)
    y          = SSD(x, dt, A, B, C) + D * x          # recurrent/ssd.py: chunked on prefill, step by step on decode
    out        = out_proj(rmsnorm_grouped(y * silu(z)) * norm_weight)

Falcon-H1 adds, as data in MambaDims: its ssm_multipliers on in_proj's five segments (z, x, B, C, dt: `scales`),
and another output gate (`norm`): rmsnorm_grouped(y) * norm_weight * silu(z) (mamba_norm_before_gate), or
y * silu(z) with no norm at all (mamba_rms_norm false).

State per sequence (core/cache: StateLayout): "conv" [inner + 2 G N, d_conv - 1] and "ssm" [heads, head_dim, N],
float32. Every sequence's run comes from meta.seq_ids/counts; no token of one reaches another's state.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import reference_engine.core.families as families
from reference_engine.core.families.base import MambaDims
from reference_engine.core.layers.norms import rms
from reference_engine.core.layers.step import LayerStep
from reference_engine.core.recurrent.causal_conv import causal_conv
from reference_engine.core.recurrent.ssd import ssd_chunked, ssd_recurrent


def group_rms(g: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """g [T, inner] float32 -> RMSNorm without weight, the statistics taken over each of `groups` slices."""
    g = g.view(g.shape[0], groups, -1)
    return rms(g, eps).view(g.shape[0], -1)


def gated_rms_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """y, z [T, inner] -> weight * RMSNorm(y * silu(z)) with the statistics taken over each of `groups` slices."""
    return weight * group_rms(y.float() * F.silu(z.float()), groups, eps).to(y.dtype)


def output_gate(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor | None, d: MambaDims,
                eps: float) -> torch.Tensor:
    """y (the SSD output, float32), z [T, inner] -> the gated output [T, inner] as `d.norm` says."""
    if d.norm == "gated":
        return gated_rms_norm(y, z, weight.float(), d.groups, eps)
    gate = F.silu(z.float())
    if d.norm == "gate":                                               # Falcon-H1, mamba_rms_norm false
        return y * gate
    return weight.float() * group_rms(y, d.groups, eps) * gate        # "norm_gate": norm first, then the gate


def segment_scales(d: MambaDims, device) -> torch.Tensor:
    """[inner + conv_dim + heads] float32: each in_proj segment's multiplier (z, x, B, C, dt)."""
    sizes = (d.inner, d.inner, d.groups * d.d_state, d.groups * d.d_state, d.heads)
    return torch.cat([torch.full((n,), float(m), device=device) for n, m in zip(sizes, d.scales)])


def mamba2_block(x: torch.Tensor, w, config, step: LayerStep, dims: MambaDims | None = None) -> torch.Tensor:
    """x [T, hidden] (normed) -> [T, hidden]; stages each sequence's conv window and SSM state."""
    d, e = dims or families.settings(config).mamba, w.extra
    layer, cache, meta, linear = step.layer, step.cache, step.meta, step.linear
    zxbcdt = linear(x, e["ssm_in"], e.get("ssm_in_bias"))                          # [T, inner + conv_dim + heads]
    if d.scales is not None:                                                          # Falcon-H1 ssm_multipliers
        zxbcdt = (zxbcdt.float() * segment_scales(d, x.device)).to(x.dtype)
    z, xbc, dt = zxbcdt.split([d.inner, d.conv_dim, d.heads], dim=-1)
    A = -torch.exp(e["A_log"].float())                                               # [heads]
    ys, at = [], 0
    for seq, n in zip(meta.seq_ids, meta.counts):
        state = cache.states.get(layer, seq)
        conv, window_after = causal_conv(xbc[at:at + n], e["ssm_conv"][:, 0, :], e.get("ssm_conv_bias"),
                                         state["conv"])
        xs, B, C = F.silu(conv).float().split([d.inner, d.groups * d.d_state, d.groups * d.d_state], dim=-1)
        xs = xs.view(n, d.heads, d.head_dim)
        B, C = (t.view(n, d.groups, d.d_state).repeat_interleave(d.heads // d.groups, dim=1) for t in (B, C))
        step = F.softplus(dt[at:at + n].float() + e["dt_bias"].float()).clamp(d.dt_min, d.dt_max)   # [n, heads]
        if n == 1:
            y, ssm = ssd_recurrent(xs, step, A, B, C, state["ssm"])
        else:
            y, ssm = ssd_chunked(xs, step, A, B, C, state["ssm"], d.chunk)
        ys.append((y + e["D"].float()[:, None] * xs).reshape(n, d.inner))           # D skip
        cache.states.stage(layer, seq, {"conv": window_after, "ssm": ssm})
        at += n
    y = torch.cat(ys) if len(ys) > 1 else ys[0]                                       # [T, inner] float32
    y = output_gate(y, z, e.get("ssm_norm"), d, config.rms_norm_eps)
    return linear(y.to(x.dtype), e["ssm_out"], e.get("ssm_out_bias"))
