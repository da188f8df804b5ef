"""tests/same_sums.py's tolerance admits a different summation order and nothing more: float32 drift of a few
ulps passes and a 1e-3 fault does not; a bfloat16 head whose sums round one ulp apart passes, a float32 lane
compared with a bfloat16 one does not."""
from __future__ import annotations

import pytest
import torch

from tests.same_sums import assert_same_sums


def head(dtype, order):
    gen = torch.Generator().manual_seed(0)
    h, w = torch.randn(42, 256, generator=gen), torch.randn(512, 256, generator=gen) / 16
    if order == "blocked":                       # the same dot products in 8-row blocks of the head
        return torch.cat([torch.nn.functional.linear(h.to(dtype), w[i:i + 8].to(dtype)) for i in range(0, 512, 8)],
                         1).float()
    if order == "reversed":                      # the sum over hidden taken backwards, in float64 then rounded
        return (h.to(dtype).double().flip(1) @ w.to(dtype).double().flip(1).T).to(dtype).float()
    return torch.nn.functional.linear(h.to(dtype), w.to(dtype)).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_another_summation_order_passes(dtype):
    assert_same_sums(head(dtype, "blocked"), head(dtype, "whole"), dtype)
    assert_same_sums(head(dtype, "reversed"), head(dtype, "whole"), dtype)


def test_a_real_difference_fails():
    want = head(torch.float32, "whole")
    with pytest.raises(AssertionError, match="max diff"):
        assert_same_sums(want + 1e-3, want)
    with pytest.raises(AssertionError):           # a float32 lane is not a bfloat16 shadow
        assert_same_sums(head(torch.float32, "whole"), head(torch.bfloat16, "whole"), torch.bfloat16)
