"""The RMS statistic, once, and the RMSNorm forms the families use (Settings.norm picks one by name).

Every norm of the engine divides by the root mean square of the last dimension: the decoder's norms, the q/k
norms, MLA's latent norms, Llama 4's weightless l2 norm, the Gated DeltaNet's and Mamba2's gated output norms.
They differ only in the dtype the weight meets the normed values in, which transformers fixes per family.
"""
from __future__ import annotations

import torch


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, in x's dtype (callers pass float32)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # statistics in float32 whatever the model dtype, the weight applied in the model dtype (as transformers)
    return weight * rms(x.float(), eps).to(x.dtype)


def rms_norm_plus_one(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Gemma: the weight is stored as an offset from 1, and the whole product runs in float32
    return (rms(x.float(), eps) * (1.0 + weight.float())).to(x.dtype)


def rms_norm_f32(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # gpt-oss: the weight applied in float32 too (transformers keeps its norms in fp32), then cast back
    return (weight.float() * rms(x.float(), eps)).to(x.dtype)


NORMS = {"rms": rms_norm, "rms_plus_one": rms_norm_plus_one, "rms_f32": rms_norm_f32}
