"""KV-cache checks: the tolerance rule (float32 tight, low precision top-k containment), and the far-position check
firing on an engine whose cache writes are sabotaged (and silent on the healthy one). The paged-decode and
padded-batch self-tests that used to live here (KVC001/KVC002) are tests/checks/engine/test_selftest.py's."""
from __future__ import annotations

import pytest
import torch

from checks.engine import kv_cache
from checks.shared import logit_compare
from checks.catalogue.inputs import CheckInputs


@pytest.fixture
def ctx(factory_model_dir):
    return CheckInputs(factory_model_dir("llama"), quick=True)


def test_close_float32_is_tight():
    a = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 5
    assert logit_compare.close(a, a.clone(), torch.float32)["ok"]
    assert not logit_compare.close(a + 1e-2, a, torch.float32)["ok"]          # 2e-3 relative: too far in fp32


def test_close_low_precision_accepts_top_k_swaps_only():
    base = torch.zeros(1, 10)
    base[0, :3] = torch.tensor([5.0, 4.99, 1.0])
    swapped = base.clone()
    swapped[0, 1] = 5.01                                                 # argmax 0 -> 1, both in the top 5
    result = logit_compare.close(swapped, base, torch.bfloat16)
    assert result["ok"] and result["argmax_mismatch"] == [0]
    assert not logit_compare.close(swapped, base, torch.float32)["ok"]
    far = base.clone()
    far[0, 9] = 5.2                                                      # a token outside base's top 5 wins
    assert logit_compare.close(far, base, torch.bfloat16)["not_in_top_k"] == [0]
    assert not logit_compare.close(far, base, torch.bfloat16)["ok"]
    nan = base.clone()
    nan[0, 0] = float("nan")
    assert not logit_compare.close(nan, base, torch.bfloat16)["ok"]


def sabotage_writes(monkeypatch, cache, when):
    """Cache writes for which when(slots) holds go one slot further (an off-by-one slot mapping).

    The pools are filled with seeded noise first, so a skipped slot never holds by chance what a correct write
    would have left there: they come from torch.empty, which hands back whatever a freed buffer held (in a long
    test run, possibly an earlier engine's cache of the same model and probes)."""
    noise = torch.Generator(device="cpu").manual_seed(0)
    for pool in [*cache.k_pools, *cache.v_pools]:
        pool.copy_(torch.randn(pool.shape, generator=noise, dtype=torch.float32).to(pool.dtype))
    original = cache.write

    def write(layer, slots, k, v):
        original(layer, slots + 1 if when(slots) else slots, k, v)
    monkeypatch.setattr(cache, "write", write)


def test_healthy_engine_passes(ctx):
    assert list(kv_cache.far_positions(ctx)) == []


def test_far_positions_compare_the_decoded_tail_with_a_recompute(ctx, monkeypatch):
    sabotage_writes(monkeypatch, ctx.engine.cache, lambda slots: slots.numel() == 1)
    (problem,) = kv_cache.far_positions(ctx)
    assert problem.severity == "error" and problem.evidence["tokens"] == 128   # --quick CPU budget
    assert "float32 full recompute" in problem.message


def test_trained_context_reads_phi3_style_and_rope_parameters():
    assert kv_cache.trained_context({"original_max_position_embeddings": 4096}) == 4096
    assert kv_cache.trained_context({"rope_parameters": {"original_max_position_embeddings": 8192}}) == 8192
    assert kv_cache.trained_context({"max_position_embeddings": 4096}) is None


def test_healthy_longrope_phi3_passes_at_the_end_of_its_context(factory_model_dir):
    """Phi-3 LongRoPE trained on 512 positions, extended to 2048: the check's chunked prefill crosses the switch to
    the long factors; the engine recomputes the sequence there (as transformers' generate does), so the decoded
    tail agrees with the full recompute and a healthy model gets no finding."""
    model = factory_model_dir("phi3", max_position_embeddings=2048, original_max_position_embeddings=512,
                              rope_scaling={"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(8)],
                                            "long_factor": [1.0 + 0.5 * i for i in range(8)]})
    ctx = CheckInputs(model, quick=False)
    assert kv_cache.far_budget(ctx) == 2048 and ctx.engine.rope.restart_at == 512
    assert list(kv_cache.far_positions(ctx)) == []
