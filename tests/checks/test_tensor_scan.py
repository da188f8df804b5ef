"""The streamed weight scan equals a direct computation whatever the block size, and counts NaN/Inf exactly."""
from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from checks.analysis.tensor_scan import scan_weights
from reference_engine.files.weights import Weights

EMBED = "model.embed_tokens.weight"


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 12), chunk=st.integers(1, 64),
       bad=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["nan", "inf", "-inf", "1e30", "0"])),
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
    assert math.isclose(stats.rms, float(clean.double().square().mean().sqrt()), rel_tol=1e-5, abs_tol=1e-30) \
        or math.isinf(stats.rms)
    rows_stats = scan.rows[EMBED]
    torch.testing.assert_close(rows_stats.amax, clean.abs().amax(dim=1))
    torch.testing.assert_close(rows_stats.norms, torch.linalg.vector_norm(clean, dim=1), rtol=1e-5, atol=0,
                               equal_nan=True)
    torch.testing.assert_close(rows_stats.row_sum, clean.double().sum(dim=0), rtol=1e-5, atol=1e-5)
    assert "model.norm.weight" not in scan.rows


def test_scan_restores_thread_count(tmp_path):
    save_file({EMBED: torch.ones(3, 2)}, str(tmp_path / "model.safetensors"))
    before = torch.get_num_threads()
    scan_weights(Weights.open(tmp_path))
    assert torch.get_num_threads() == before
