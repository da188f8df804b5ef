"""The tolerance for two paths that compute the same dot products but split a product differently:
the streaming core's LM head in row blocks against the resident engine's one product, a LoRA delta merged in
row blocks against the whole. Each logit is mathematically the same sum, but a GEMM picks its kernel and its
blocking by shape (and MKL by CPU: AMD and Intel take other code paths), so the terms may be added in another
order: a few units in the last place, a property of one BLAS on one CPU, not of the engine. Measured: 4.8e-7
at logits up to 1.3 (quantized streaming test, 2-core AMD EPYC); 0 on the Intel machine the tests were
written on.

- float32: |got - want| <= FLOAT32_REL * max(1, max |want|). 1e-5 is ~20x the measured drift and >= 100x
  below the smallest fault these tests tell apart (a dropped bias, a wrong dequantization or adapter: > 1e-3).
- bfloat16 / float16 (a shadow lane): the layers run identical products (same shapes) and only the head's
  sums change order; the head rounds each sum once to the lane dtype, so each logit is equal or one unit in
  the last place apart: |got - want| <= eps(dtype) * |want| elementwise, and at least HALF_SAME of them
  identical. (A looser global bound could not tell a bfloat16 lane from a float32 one: those differ by ~1-2
  bfloat16 ulps too.)
"""
from __future__ import annotations

import torch

FLOAT32_REL = 1e-5
HALF_SAME = 0.9


def assert_same_sums(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype = torch.float32) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = (got.double() - want.double()).abs()
    if dtype == torch.float32:
        bound = FLOAT32_REL * max(1.0, float(want.abs().max()))
        assert float(diff.max()) <= bound, f"max diff {float(diff.max()):.3g} > {bound:.3g}"
        return
    ulp = torch.finfo(dtype).eps * want.double().abs() + torch.finfo(dtype).tiny
    over = int((diff > ulp).sum())
    same = float((diff == 0).double().mean())
    assert over == 0, f"{over} of {diff.numel()} logits more than one {dtype} ulp apart (max {float(diff.max()):.3g})"
    assert same >= HALF_SAME, f"only {same:.1%} of the logits identical"
