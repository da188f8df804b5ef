"""Mamba2's SSD in its two forms (core/recurrent/ssd.py): the chunked prefill form equals the token-by-token
recurrence at every chunk size, carrying a non-zero state in and out, with decays far from 0 and 1."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core.recurrent.ssd import ssd_chunked, ssd_recurrent


def inputs(T=23, heads=3, head_dim=4, d_state=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, B, C = (torch.randn(T, heads, d, generator=g) for d in (head_dim, d_state, d_state))
    dt = torch.rand(T, heads, generator=g) * 0.6 + 0.2                  # dt in [0.2, 0.8]
    A = -(torch.rand(heads, generator=g) + 0.3)                         # exp(dt A) in ~[0.3, 0.95]
    state = torch.randn(heads, head_dim, d_state, generator=g)
    return x, dt, A, B, C, state


@pytest.mark.parametrize("chunk", [1, 4, 7, 23, 64])
def test_chunked_equals_recurrent(chunk):
    x, dt, A, B, C, state = inputs()
    y_rec, s_rec = ssd_recurrent(x, dt, A, B, C, state)
    y_chk, s_chk = ssd_chunked(x, dt, A, B, C, state, chunk)
    assert torch.allclose(y_chk, y_rec, atol=1e-5, rtol=1e-5) and torch.allclose(s_chk, s_rec, atol=1e-5, rtol=1e-5)
    assert y_rec.abs().max() > 0.5                                      # not two tiny tensors


def test_the_state_in_matters_and_splitting_carries_it():
    x, dt, A, B, C, state = inputs(seed=1)
    y_zero, _ = ssd_recurrent(x, dt, A, B, C, torch.zeros_like(state))
    y, s = ssd_recurrent(x, dt, A, B, C, state)
    assert (y - y_zero).abs().max() > 1e-2
    y1, mid = ssd_chunked(x[:10], dt[:10], A, B[:10], C[:10], state, 4)
    y2, end = ssd_chunked(x[10:], dt[10:], A, B[10:], C[10:], mid, 4)
    assert torch.allclose(torch.cat([y1, y2]), y, atol=1e-5) and torch.allclose(end, s, atol=1e-5)
