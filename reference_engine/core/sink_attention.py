"""Attention with learned per-head sinks (gpt-oss): one extra logit per head joins every query's softmax and
is dropped after it, so a head can put weight "nowhere" instead of on some key.

    probs = softmax([q.k_1 * scale, ..., q.k_K * scale, sink_h])[:K]      (per query, per head h)
    out   = probs @ V

SDPA has no sinks, so this is transformers' eager formula (GptOss eager_attention_forward): masked scores,
the sink column appended, the row maximum subtracted, softmax in the scores' dtype, the sink column dropped.
"""
from __future__ import annotations

import torch


def sink_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                   scale: float, sinks: torch.Tensor) -> torch.Tensor:
    """q [B, H, Q, d], k/v [B, kv_heads, K, d], mask [B, 1, Q, K] bool (True = may attend) or None,
    sinks [H] -> [B, H, Q, d]."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)   # GQA: [B, H, K, d]
    scores = torch.matmul(q, k.transpose(2, 3)) * scale                              # [B, H, Q, K]
    if causal:
        qn, kn = scores.shape[-2:]
        mask = torch.ones(qn, kn, dtype=torch.bool, device=q.device).tril(kn - qn)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    b, h, qn, _ = scores.shape
    sink = sinks.to(scores.dtype).view(1, h, 1, 1).expand(b, h, qn, 1)               # [B, H, Q, 1]
    logits = torch.cat([scores, sink], dim=-1)                                       # [B, H, Q, K + 1]
    logits = logits - logits.amax(dim=-1, keepdim=True)
    probs = torch.softmax(logits, dim=-1)[..., :-1]                                  # the sink's share dropped
    return torch.matmul(probs.to(v.dtype), v)
