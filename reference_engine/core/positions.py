"""How a layer's queries and keys learn their positions: rotary embedding (half-split or Llama 4's interleaved
pairs), or none at all on a NoPE layer, plus what Llama 4 does around it.

- RoPE layers rotate q and k (`rope.apply_rope`, the rotate-half layout; `apply_rope_interleaved` for Llama 4,
  which views each head as d/2 complex numbers (x[2i], x[2i+1]) and multiplies by e^(i * pos * inv_freq[i])).
- NoPE layers (SmolLM3's and Llama 4's `no_rope_layers` entries 0) leave q and k untouched: position comes only
  from the causal mask. An engine that rotates them anyway runs a different model.
- Llama 4 then l2-normalises every q and k head on its RoPE layers (`use_qk_norm`: a weightless RMSNorm), and on
  its NoPE layers scales q by 1 + attn_scale * log1p(floor((pos + 1) / floor_scale)) (attention temperature
  tuning: a sharper softmax far into a long context).
Everything reads `Settings` (core/families); nothing here knows a family by name.
"""
from __future__ import annotations

import torch

from reference_engine.core.families.base import Settings
from reference_engine.core.layers.norms import rms
from reference_engine.core.rope import apply_rope


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, d]; cos/sin [T, d] as the table holds them (cat(freqs, freqs)): pair (2i, 2i+1) turns by
    angle i, computed in float32 and cast back (transformers' view_as_complex product)."""
    half = cos.shape[-1] // 2
    c, s = cos[:, None, :half].float(), sin[:, None, :half].float()   # [T, 1, d/2]
    real, imag = x.float()[..., 0::2], x.float()[..., 1::2]           # [T, heads, d/2] each
    out = torch.stack([real * c - imag * s, real * s + imag * c], dim=-1)   # [T, heads, d/2, 2]
    return out.flatten(-2).to(x.dtype)


def l2_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Weightless RMSNorm over the last dim, in float32 (Llama4TextL2Norm)."""
    return rms(x.float(), eps).to(x.dtype)


def temperature_scale(positions: torch.Tensor, attn_scale: float, floor_scale: float) -> torch.Tensor:
    """positions [T] -> [T, 1, 1] factors 1 + attn_scale * log1p(floor((pos + 1) / floor_scale)) in float32."""
    return (torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0)[:, None, None]


def place(qk: torch.Tensor, heads: int, layer: int, s: Settings, cos: torch.Tensor, sin: torch.Tensor,
          positions: torch.Tensor, eps: float) -> torch.Tensor:
    """qk [T, heads + kv_heads, d] (q heads first) -> the same with the layer's position handling applied."""
    where = s.positions
    if layer in where.nope_layers:
        if where.temperature is None:
            return qk
        q = (qk[:, :heads] * temperature_scale(positions, *where.temperature)).to(qk.dtype)
        return torch.cat([q, qk[:, heads:]], dim=1)
    qk = apply_rope_interleaved(qk, cos, sin) if where.interleaved else apply_rope(qk, cos, sin)
    return l2_norm(qk, eps) if s.attention.qk_l2_norm else qk
