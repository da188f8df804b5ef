"""Decode-step projections (reference_engine/linear.py): oneDNN kernels and packed weights against F.linear."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from reference_engine.core import linear
from reference_engine.engine import Engine
from tests.reference_engine.core.tiny_models import any_ids, engine


@pytest.mark.parametrize("rows", [1, 3, 16, 40])
def test_decode_linear_equals_f_linear_plain_and_packed(rows):
    gen = torch.Generator().manual_seed(rows)
    x, w, b = (torch.randn(rows, 96, generator=gen), torch.randn(200, 96, generator=gen),
               torch.randn(200, generator=gen))
    expected = F.linear(x, w, b)
    assert (linear.decode_linear(x, w, b) - expected).abs().max().item() <= 1e-4
    packed = linear.pack_for_decode(_weights_of(w)).lm_head
    got = linear.decode_linear(x, packed, b)
    assert got.shape == expected.shape and (got - expected).abs().max().item() <= 1e-4


def test_float16_uses_f_linear_and_is_not_packed():
    x, w = torch.randn(2, 8, dtype=torch.float16), torch.randn(4, 8, dtype=torch.float16)
    assert torch.equal(linear.decode_linear(x, w), F.linear(x, w))
    weights = _weights_of(w)
    assert linear.pack_for_decode(weights) is weights


def test_weights_over_the_budget_are_not_packed(monkeypatch):
    monkeypatch.setattr(linear, "PACK_LIMIT_BYTES", 16)
    weights = _weights_of(torch.randn(4, 8))
    assert linear.pack_for_decode(weights) is weights


def test_decode_follows_a_replaced_weights_object():
    eng = engine("llama_rope_yarn")
    ids = any_ids(9, seed=2)
    eng.prefill([0], [ids])
    before = eng.decode([0], [5])
    eng.cache.truncate(0, len(ids))
    eng.core.weights = _scaled_head(eng, 2.0)         # a new weights object: decode must not use the old pack
    after = eng.decode([0], [5])
    assert (after - 2.0 * before).abs().max().item() <= 1e-4 * max(1.0, before.abs().max().item())
    eng.free(0)


def _weights_of(w: torch.Tensor):
    from reference_engine.core.model_weights import ModelWeights
    return ModelWeights(embed=w, layers=[], norm=torch.ones(w.shape[1], dtype=w.dtype), lm_head=w)


def _scaled_head(eng: Engine, factor: float):
    from dataclasses import replace
    return replace(eng.weights, lm_head=eng.weights.lm_head * factor)


# Seeds torch's global generator, optionally imports every module of the given packages, then prints the global
# state's digest and a draw: both must be the same with and without the imports.
RNG_PROBE = """
import hashlib, importlib, pkgutil, sys
import torch
torch.manual_seed(1234)
for package in sys.argv[1:]:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
print(hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest(), torch.randn(4).tolist())
"""


def _rng_after_import(*packages: str) -> str:
    done = subprocess.run([sys.executable, "-c", RNG_PROBE, *packages], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[4])
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_engine_leaves_torchs_random_state_alone():
    """linear.py probes oneDNN at import; drawing those probe tensors from the global generator shifted every
    seeded run of a program that imported the engine after torch.manual_seed."""
    untouched = _rng_after_import()
    assert _rng_after_import("reference_engine") == untouched


def _bf16_reorder_supported() -> bool:
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=torch.bfloat16), 4)
        return True
    except (AttributeError, RuntimeError):     # a torch without oneDNN has no such op
        return False


@pytest.mark.parametrize("rows", [1, 16])
def test_bfloat16_is_packed_and_stays_within_bf16_rounding(rows):
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 96, generator=gen).bfloat16(), torch.randn(200, 96, generator=gen).bfloat16()
    packed = linear.pack_for_decode(_weights_of(w)).lm_head
    # oneDNN packs bf16 only on CPUs with avx512bw/vl/dq or avx_ne_convert (not on an AVX2 AMD EPYC), and only a
    # torch with oneDNN linear ops packs at all: elsewhere the weights stay plain, and the same decode path must
    # still hold the rounding bound
    assert packed.is_mkldnn or (packed is w and (linear._ONEDNN is None or not _bf16_reorder_supported()))
    got, expected = linear.decode_linear(x, packed).float(), F.linear(x.float(), w.float())
    assert (got - expected).abs().max().item() <= 0.02 * expected.abs().max().item()


def test_single_row_float32_uses_mkl_on_intel_only(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(linear, "_INTEL", True)
    assert linear.single_row_plain(1, torch.float32, cpu)
    assert not linear.single_row_plain(2, torch.float32, cpu) and not linear.single_row_plain(1, torch.bfloat16, cpu)
    monkeypatch.setattr(linear, "_INTEL", False)
    assert not linear.single_row_plain(1, torch.float32, cpu)


def test_decode_projection_names_the_kernel_decode_runs(monkeypatch):
    """benchmarks/decode_profile.py times decode's projections through this choice, so it must be the one decode
    makes: plain weights and F.linear for one float32 row on Intel, the packed copy for more rows."""
    eng = engine("llama_rope_yarn")
    monkeypatch.setattr("reference_engine.core.engine.single_row_plain", lambda rows, dtype, device: rows == 1)
    assert eng.core.decode_projection(1) == (F.linear, eng.core.weights)
    fn, weights = eng.core.decode_projection(4)
    assert fn is linear.decode_linear and weights is eng.core._weights_for_decode()
    ids = any_ids(7, seed=3)
    eng.prefill([0], [ids])
    calls = []

    def chosen(rows):
        calls.append(rows)
        return F.linear, eng.core.weights
    monkeypatch.setattr(eng.core, "decode_projection", chosen)
    eng.decode([0], [5])
    assert calls == [1]
    eng.free(0)
