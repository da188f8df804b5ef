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
from reference_engine.core.families.hybrid.qwen3_next import DeltaNetDims, dims
from reference_engine.core.layers.norms import rms
from reference_engine.core.layers.step import LayerStep
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
    return (weight * rms(x.float(), eps).to(x.dtype) * F.silu(z.float())).to(x.dtype)


def heads(mixed: torch.Tensor, d: DeltaNetDims) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The conv's output [n, conv_dim] -> q, k [n, v_heads, k_dim] (silu, l2-normed in float32, each key head
    repeated for its value heads, q scaled by k_dim ** -0.5) and v [n, v_heads, v_dim]."""
    n = mixed.shape[0]
    q, k, v = F.silu(mixed).split([d.key_dim, d.key_dim, d.value_dim], dim=-1)
    q, k = (l2norm(t.reshape(n, d.k_heads, d.k_dim).float()) for t in (q, k))
    if d.v_heads != d.k_heads:                                  # each q/k head serves v_heads / k_heads heads
        q, k = (t.repeat_interleave(d.v_heads // d.k_heads, dim=1) for t in (q, k))
    return q * d.k_dim ** -0.5, k, v.reshape(n, d.v_heads, d.v_dim)


def mix_sequence(qkv: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, conv_w: torch.Tensor,
                 state: dict, d: DeltaNetDims) -> tuple[torch.Tensor, dict]:
    """One sequence's run: qkv [n, conv_dim], g/beta [n, v_heads], state {"conv" [conv_dim, K-1], "recurrent"
    [v_heads, k_dim, v_dim]} -> (o [n, v_heads, v_dim] float32, the new state)."""
    mixed, window = causal_conv(qkv, conv_w, None, state["conv"])          # [n, conv_dim]
    q, k, v = heads(mixed, d)
    rule = recurrent_gated_delta_rule if qkv.shape[0] == 1 else chunked_gated_delta_rule
    o, recurrent = rule(q, k, v, g, beta, state["recurrent"])
    return o, {"conv": window, "recurrent": recurrent}


def mix_decode(qkv: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, conv_w: torch.Tensor,
               states: list[dict], d: DeltaNetDims) -> tuple[torch.Tensor, list[dict]]:
    """A decode step, one token of each of B sequences at once: the sequences sit side by side as conv
    channels and as heads of one recurrent step, each still reading and writing only its own state.
    qkv [B, conv_dim], g/beta [B, v_heads] -> (o [B, v_heads, v_dim] float32, the new state of each)."""
    b = qkv.shape[0]
    window = torch.cat([s["conv"] for s in states])                        # [B * conv_dim, K-1]
    mixed, window = causal_conv(qkv.reshape(1, -1), conv_w.repeat(b, 1), None, window)   # [1, B * conv_dim]
    q, k, v = heads(mixed.view(b, d.conv_dim), d)
    s = torch.cat([st["recurrent"] for st in states])                      # [B * v_heads, k_dim, v_dim]
    o, s = recurrent_gated_delta_rule(q.reshape(1, -1, d.k_dim), k.reshape(1, -1, d.k_dim),
                                      v.reshape(1, -1, d.v_dim), g.reshape(1, -1), beta.reshape(1, -1), s)
    return o.view(b, d.v_heads, d.v_dim), [{"conv": c, "recurrent": r}
                                           for c, r in zip(window.split(d.conv_dim), s.split(d.v_heads))]


def gated_delta_net_block(x: torch.Tensor, w, config: ModelConfig, step: LayerStep) -> torch.Tensor:
    """x [T, hidden] (normed) -> [T, hidden]; stages each sequence's new conv window and recurrent state."""
    d, e, layer, cache, meta, linear = dims(config), w.extra, step.layer, step.cache, step.meta, step.linear
    grouped = "qkvz_grouped" in e
    qkvz = linear(x, e["qkvz_grouped" if grouped else "qkvz"])             # [T, 2 key_dim + 2 value_dim]
    ba = linear(x, e["ba_grouped" if grouped else "ba"])                   # [T, 2 v_heads]
    qkv, z, b, a = split_projections(qkvz, ba, d, grouped)
    beta = b.sigmoid()                                                     # write strength in (0, 1)
    g = -e["A_log"].float().exp() * F.softplus(a.float() + e["dt_bias"])   # log decay per token and head
    conv_w = e["conv"].reshape(d.conv_dim, d.kernel)
    if len(meta.counts) > 1 and max(meta.counts) == 1:                     # a decode step: all at once
        o, states = mix_decode(qkv, g, beta, conv_w, [cache.states.get(layer, s) for s in meta.seq_ids], d)
        for seq, state in zip(meta.seq_ids, states):
            cache.states.stage(layer, seq, state)
        return out_projection(o.to(x.dtype), z, e, config, d, linear)
    outs, at = [], 0
    for seq, count in zip(meta.seq_ids, meta.counts):
        part = slice(at, at + count)
        o, state = mix_sequence(qkv[part], g[part], beta[part], conv_w, cache.states.get(layer, seq), d)
        cache.states.stage(layer, seq, state)
        outs.append(o)
        at += count
    return out_projection(torch.cat(outs).to(x.dtype), z, e, config, d, linear)


def out_projection(o: torch.Tensor, z: torch.Tensor, e: dict, config: ModelConfig, d: DeltaNetDims,
                   linear) -> torch.Tensor:
    """o, z [T, v_heads, v_dim] -> out_proj(gated_rms_norm(o, z)) [T, hidden]."""
    y = gated_rms_norm(o, z, e["norm"], config.rms_norm_eps)
    return linear(y.reshape(y.shape[0], d.value_dim), e["out"])
