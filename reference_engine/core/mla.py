"""Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the "mla" mixer.

Each token's keys and values come from one compressed latent: kv_a projects the normed hidden state to
kv_lora_rank + qk_rope_head_dim features, the first part is RMS-normed (the latent), the second is one rope key
shared by every head. The paged cache keeps exactly these two per token (layout KVLayout(1, kv_lora_rank +
qk_rope_head_dim, 0): the latent and the rotated rope key, nothing for V), and attention expands the cached
latents through kv_b into per-head k_nope and v at attention time, as transformers' DeepseekV3Attention does.
Queries: q_proj, or q_a -> RMSNorm -> q_b when q_lora_rank is set. The softmax scale is qk_head_dim ** -0.5 times
YaRN's mscale(factor, mscale_all_dim) squared (rope.softmax_mscale, as transformers' yarn_apply_mscale).

Roles in LayerWeights.extra (H heads, r = kv_lora_rank, nope/rope/v the head dims):
  q        [H * (nope + rope), hidden]   (no q LoRA)      | q_a [q_lora_rank, hidden], q_a_norm [q_lora_rank],
                                                           | q_b [H * (nope + rope), q_lora_rank], q_a_bias
  kv_a     [r + rope, hidden]  (+ kv_a_bias)    kv_a_norm [r]    kv_b [H * (nope + v), r]
and LayerWeights.o [hidden, H * v] (+ o_bias).
"""
from __future__ import annotations

import torch

from reference_engine.core import families
from reference_engine.core.attention import attend, gather_context
from reference_engine.core.layers.norms import rms_norm
from reference_engine.core.layers.step import LayerStep
from reference_engine.core.rope import apply_rope, softmax_mscale


def rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, rope] whose rotary pairs are (x0, x1), (x2, x3) ... -> rotated, laid out as [evens | odds]
    (transformers' apply_rotary_pos_emb_interleave; V2's complex product gives the same pairs in place: q and k
    share the layout, so every q.k product is the same). cos/sin [T, rope] = cat(freqs, freqs)."""
    half = cos.shape[-1] // 2
    c, s = cos[:, None, :half], sin[:, None, :half]                   # [T, 1, rope/2]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def queries(x: torch.Tensor, e: dict, m, heads: int, linear) -> torch.Tensor:
    """x [T, hidden] -> q [T, heads, nope + rope]."""
    if m.q_lora_rank is None:
        q = linear(x, e["q"], None)
    else:
        q = linear(rms_norm(linear(x, e["q_a"], e.get("q_a_bias")), e["q_a_norm"], m.lora_eps), e["q_b"], None)
    return q.view(x.shape[0], heads, m.qk_nope_head_dim + m.qk_rope_head_dim)


def expand(latents: torch.Tensor, kv_b: torch.Tensor, m, heads: int, linear):
    """Cached [B, 1, K, r + rope] -> k [B, H, K, nope + rope], v [B, H, K, v] (per-head keys and values)."""
    b, _, k_len, _ = latents.shape
    latent, k_rope = latents.split([m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
    kv = linear(latent, kv_b, None).view(b, k_len, heads, m.qk_nope_head_dim + m.v_head_dim).transpose(1, 2)
    k_nope, v = kv.split([m.qk_nope_head_dim, m.v_head_dim], dim=-1)         # [B, H, K, nope], [B, H, K, v]
    k = torch.cat([k_nope, k_rope.expand(b, heads, k_len, m.qk_rope_head_dim)], dim=-1)
    return k, v


def mla_block(x: torch.Tensor, w, config, step: LayerStep) -> torch.Tensor:
    """x [T, hidden] (normed) -> attention output [T, hidden]; writes each token's latent and rope key. The
    q_a/kv_a norms: statistics in float32, the weight applied in the model dtype (as transformers)."""
    m, e, heads = families.settings(config).mla, w.extra, config.num_attention_heads
    layer, cache, meta, cos, sin, linear = step.layer, step.cache, step.meta, step.cos, step.sin, step.linear
    q_nope, q_rope = queries(x, e, m, heads, linear).split([m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)
    kv = linear(x, e["kv_a"], e.get("kv_a_bias"))                            # [T, r + rope]
    latent, k_rope = kv.split([m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
    latent = rms_norm(latent, e["kv_a_norm"], m.lora_eps)                    # [T, r]
    k_rope = k_rope[:, None, :]                                               # [T, 1, rope]: one head for all
    rotate = rope_interleaved if m.interleaved else apply_rope
    q_rope, k_rope = rotate(q_rope, cos, sin), rotate(k_rope, cos, sin)
    entry = torch.cat([latent[:, None, :], k_rope], dim=-1)                   # [T, 1, r + rope]
    cache.write(layer, meta.slot_mapping, entry, entry.new_empty(entry.shape[0], 1, 0))
    k, v = expand(gather_context(cache.flat_k(layer), meta), e["kv_b"], m, heads, linear)
    q = torch.cat([q_nope, q_rope], dim=-1)                                   # [T, H, nope + rope]
    scale = (m.qk_nope_head_dim + m.qk_rope_head_dim) ** -0.5 * softmax_mscale(config)
    out = attend(q, k, v, meta, step.window, scale)                                # [T, H * v]
    return linear(out, w.o, w.o_bias)
