"""The streamed weight scan equals a direct float64 computation whatever the block size, counts NaN/Inf exactly,
and neither overflows nor underflows on finite values float32 can hold."""
from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from checks.shared.weights.tensor_scan import scan_weights
from reference_engine.files.weights import Weights

EMBED = "model.embed_tokens.weight"


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 12), chunk=st.integers(1, 64),
       bad=st.lists(st.tuples(st.integers(0, 10**6),
                              st.sampled_from(["nan", "inf", "-inf", "1e30", "-3e38", "1e-30", "1e-40", "0"])),
                    max_size=4),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]), seed=st.integers(0, 10**6))
def test_chunked_scan_matches_direct(tmp_path_factory, rows, cols, chunk, bad, dtype, seed):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)).to(dtype)
    for pos, value in bad:
        x.view(-1)[pos % x.numel()] = float(value)
    d = tmp_path_factory.mktemp("scan")
    save_file({EMBED: x, "model.norm.weight": x[0].clone()}, str(d / "model.safetensors"))
    scan = scan_weights(Weights.open(d), chunk_elements=chunk)

    f = x.float()
    finite = torch.isfinite(f)
    clean = torch.where(finite, f, torch.zeros(()))
    stats = scan.tensors[EMBED]
    assert (stats.nan, stats.inf) == (int(torch.isnan(f).sum()), int(torch.isinf(f).sum()))
    assert stats.amax == float(clean.abs().max())
    assert math.isclose(stats.rms, float(clean.double().square().mean().sqrt()), rel_tol=1e-5, abs_tol=0)
    rows_stats = scan.rows[EMBED]
    torch.testing.assert_close(rows_stats.amax, clean.abs().amax(dim=1))
    assert rows_stats.norms.dtype == torch.float64 and bool(torch.isfinite(rows_stats.norms).all())
    torch.testing.assert_close(rows_stats.norms, torch.linalg.vector_norm(clean.double(), dim=1), rtol=1e-5, atol=0)
    torch.testing.assert_close(rows_stats.row_sum, clean.double().sum(dim=0), rtol=1e-5, atol=1e-5)
    assert "model.norm.weight" not in scan.rows


def test_extreme_rows_keep_their_norms(tmp_path):
    """float32 squares overflow above ~1.8e19 and vanish below ~1e-19: those rows must still get their true norm
    (an embedding row of 1e20 is huge, not infinite; a row of 1e-30 is tiny, not zero), and the RMS stays finite."""
    x = torch.randn(6, 64, generator=torch.Generator().manual_seed(0)) * 0.02
    x[1] = 1e20
    x[2] = 1e-30
    x[3] = x[5] = 3e38                                # and their column sums, 6e38, overflow float32
    x[4, 0] = 2e-45                                   # one subnormal value: the smallest a float32 holds
    save_file({EMBED: x}, str(tmp_path / "model.safetensors"))
    scan = scan_weights(Weights.open(tmp_path))
    norms, expected = scan.rows[EMBED].norms, torch.linalg.vector_norm(x.double(), dim=1)
    torch.testing.assert_close(norms, expected, rtol=1e-6, atol=0)
    assert math.isclose(float(norms[1]), 8e20, rel_tol=1e-6) and math.isclose(float(norms[2]), 8e-30, rel_tol=1e-6)
    assert float(norms[4]) > 0
    stats = scan.tensors[EMBED]
    assert stats.nonfinite == 0 and math.isclose(stats.rms, float(x.double().square().mean().sqrt()), rel_tol=1e-6)
    torch.testing.assert_close(scan.rows[EMBED].row_sum, x.double().sum(dim=0), rtol=1e-6, atol=0)
    assert bool(torch.isfinite(scan.rows[EMBED].row_sum).all())


def test_scan_restores_thread_count(tmp_path):
    save_file({EMBED: torch.ones(3, 2)}, str(tmp_path / "model.safetensors"))
    before = torch.get_num_threads()
    scan_weights(Weights.open(tmp_path))
    assert torch.get_num_threads() == before
