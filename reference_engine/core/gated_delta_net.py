"""The Gated DeltaNet token mixer (Qwen3-Next, Qwen3.5 linear-attention layers), registered as "gated_delta_net".

Per layer, as transformers' Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet:
    q, k, v, z, b, a = projections of x          (Qwen3-Next stores q/k/v/z and b/a grouped per key head)
    q, k, v = silu(causal_conv(q|k|v))           short depthwise conv over time, window carried per sequence
    q, k = l2norm(q), l2norm(k); q *= dk ** -0.5
    beta = sigmoid(b);  g = -exp(A_log) * softplus(a + dt_bias)     (log of the per-token decay, <= 0)
    o = gated_delta_rule(q, k, v, g, beta)       chunked for a run of tokens, recurrent for one token
    y = out_proj(rmsnorm(o) * w * silu(z))       gated RMSNorm per value head
The projections run over the whole packed step; the conv and the recurrence run sequence by sequence
(`meta.seq_ids/counts`), each from its own state in `cache.states`, so no token of one sequence (nor padding)
reaches another's state. The new state is staged, never written in place (core/cache/state_cache.py).

Weights (LayerWeights.extra, by role): "qkvz" [2 * key_dim + 2 * value_dim, hidden] and "ba" [2 * v_heads,
hidden] in the flat order q|k|v|z, b|a (Qwen3.5: in_proj_qkv + in_proj_z, in_proj_b + in_proj_a fused), or
"qkvz_grouped"/"ba_grouped" as Qwen3-Next stores them (per key head: q, k, its value heads' v and z; b, a);
"conv" [conv_dim, 1, K]; "A_log", "dt_bias" [v_heads]; "norm" [v_dim]; "out" [hidden, value_dim].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_engine.config import ModelConfig
from reference_engine.core.families.qwen3_next import DeltaNetDims, dims
from reference_engine.core.recurrent.causal_conv import causal_conv
from reference_engine.core.recurrent.delta_rule import chunked_gated_delta_rule, recurrent_gated_delta_rule


def split_projections(qkvz: torch.Tensor, ba: torch.Tensor, d: DeltaNetDims, grouped: bool):
    """qkvz [T, 2 key_dim + 2 value_dim], ba [T, 2 v_heads] -> qkv [T, conv_dim], z [T, v_heads, v_dim],
    b, a [T, v_heads]."""
    t = qkvz.shape[0]
    if grouped:       # Qwen3-Next: [T, k_heads, (q, k, v of its r value heads, z of them)], [T, k_heads, (b, a)]
        r = d.v_heads // d.k_heads
        q, k, v, z = qkvz.view(t, d.k_heads, -1).split([d.k_dim, d.k_dim, r * d.v_dim, r * d.v_dim], dim=-1)
        b, a = ba.view(t, d.k_heads, -1).split([r, r], dim=-1)
        qkv = torch.cat([q.reshape(t, -1), k.reshape(t, -1), v.reshape(t, -1)], dim=-1)
        return qkv, z.reshape(t, d.v_heads, d.v_dim), b.reshape(t, d.v_heads), a.reshape(t, d.v_heads)
    qkv, z = qkvz.split([d.conv_dim, d.value_dim], dim=-1)
    b, a = ba.split([d.v_heads, d.v_heads], dim=-1)
    return qkv, z.reshape(t, d.v_heads, d.v_dim), b, a


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x, z [..., v_dim] -> weight * rmsnorm(x) * silu(z), statistics and gate in float32 (transformers'
    Qwen3NextRMSNormGated: the weight meets x in the model dtype)."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * x32.to(x.dtype) * F.silu(z.float())).to(x.dtype)


def mix_sequence(qkv: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, conv_w: torch.Tensor,
                 state: dict, d: DeltaNetDims) -> tuple[torch.Tensor, dict]:
    """One sequence's run: qkv [n, conv_dim], g/beta [n, v_heads], state {"conv" [conv_dim, K-1], "recurrent"
    [v_heads, k_dim, v_dim]} -> (o [n, v_heads, v_dim] float32, the new state)."""
    n = qkv.shape[0]
    mixed, window = causal_conv(qkv, conv_w, None, state["conv"])          # [n, conv_dim]
    q, k, v = F.silu(mixed).split([d.key_dim, d.key_dim, d.value_dim], dim=-1)
    q, k = (l2norm(t.reshape(n, d.k_heads, d.k_dim).float()) for t in (q, k))
    if d.v_heads != d.k_heads:                                  # each q/k head serves v_heads / k_heads heads
        q, k = (t.repeat_interleave(d.v_heads // d.k_heads, dim=1) for t in (q, k))
    q = q * d.k_dim ** -0.5
    v = v.reshape(n, d.v_heads, d.v_dim)
    rule = recurrent_gated_delta_rule if n == 1 else chunked_gated_delta_rule
    o, recurrent = rule(q, k, v, g, beta, state["recurrent"])
    return o, {"conv": window, "recurrent": recurrent}


def gated_delta_net_block(x: torch.Tensor, w, config: ModelConfig, layer: int, cache, meta, cos, sin, window,
                          linear=F.linear) -> torch.Tensor:
    """x [T, hidden] (normed) -> [T, hidden]; stages each sequence's new conv window and recurrent state."""
    d, e = dims(config), w.extra
    grouped = "qkvz_grouped" in e
    qkvz = linear(x, e["qkvz_grouped" if grouped else "qkvz"])             # [T, 2 key_dim + 2 value_dim]
    ba = linear(x, e["ba_grouped" if grouped else "ba"])                   # [T, 2 v_heads]
    qkv, z, b, a = split_projections(qkvz, ba, d, grouped)
    beta = b.sigmoid()                                                     # write strength in (0, 1)
    g = -e["A_log"].float().exp() * F.softplus(a.float() + e["dt_bias"])   # log decay per token and head
    conv_w = e["conv"].reshape(d.conv_dim, d.kernel)
    outs, at = [], 0
    for seq, count in zip(meta.seq_ids, meta.counts):
        part = slice(at, at + count)
        o, state = mix_sequence(qkv[part], g[part], beta[part], conv_w, cache.states.get(layer, seq), d)
        cache.states.stage(layer, seq, state)
        outs.append(o)
        at += count
    o = torch.cat(outs).to(x.dtype)                                        # [T, v_heads, v_dim]
    y = gated_rms_norm(o, z, e["norm"], config.rms_norm_eps)
    return linear(y.reshape(y.shape[0], d.value_dim), e["out"])
