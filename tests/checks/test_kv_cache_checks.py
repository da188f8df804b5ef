"""KV-cache checks: the tolerance rule (float32 tight, low precision top-k containment), and each check firing
on an engine whose cache writes are sabotaged the way real bugs break them (and silent on the healthy one)."""
from __future__ import annotations

import pytest
import torch

from checks import kv_cache
from checks.context import CheckContext


@pytest.fixture
def ctx(factory_model_dir):
    return CheckContext(factory_model_dir("llama"), quick=True)


def test_close_float32_is_tight():
    a = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 5
    assert kv_cache.close(a, a.clone(), torch.float32)["ok"]
    assert not kv_cache.close(a + 1e-2, a, torch.float32)["ok"]          # 2e-3 relative: too far in fp32


def test_close_low_precision_accepts_top_k_swaps_only():
    base = torch.zeros(1, 10)
    base[0, :3] = torch.tensor([5.0, 4.99, 1.0])
    swapped = base.clone()
    swapped[0, 1] = 5.01                                                 # argmax 0 -> 1, both in the top 5
    result = kv_cache.close(swapped, base, torch.bfloat16)
    assert result["ok"] and result["argmax_mismatch"] == [0]
    assert not kv_cache.close(swapped, base, torch.float32)["ok"]
    far = base.clone()
    far[0, 9] = 5.2                                                      # a token outside base's top 5 wins
    assert kv_cache.close(far, base, torch.bfloat16)["not_in_top_k"] == [0]
    assert not kv_cache.close(far, base, torch.bfloat16)["ok"]
    nan = base.clone()
    nan[0, 0] = float("nan")
    assert not kv_cache.close(nan, base, torch.bfloat16)["ok"]


def sabotage_writes(monkeypatch, cache, when):
    """Cache writes for which when(slots) holds go one slot further (an off-by-one slot mapping)."""
    original = cache.write

    def write(layer, slots, k, v):
        original(layer, slots + 1 if when(slots) else slots, k, v)
    monkeypatch.setattr(cache, "write", write)


def test_healthy_engine_passes(ctx):
    for check in (kv_cache.incremental_vs_full, kv_cache.batch_vs_alone, kv_cache.far_positions):
        assert list(check(ctx)) == []


def test_incremental_fires_when_decode_writes_to_the_wrong_slot(ctx, monkeypatch):
    sabotage_writes(monkeypatch, ctx.engine.cache, lambda slots: slots.numel() == 1)
    (problem,) = kv_cache.incremental_vs_full(ctx)
    assert problem.evidence["rel_diff"] > 1e-3 and "incremental decode" in problem.message


def test_batch_fires_when_batched_writes_are_shifted(ctx, monkeypatch):
    sabotage_writes(monkeypatch, ctx.engine.cache, lambda slots: slots.numel() > 1 and
                    bool((slots.diff() != 1).any()))                      # only multi-sequence steps
    (problem,) = kv_cache.batch_vs_alone(ctx)
    assert "batched logits differ" in problem.message


def test_batch_fires_on_positions_that_ignore_padding(ctx):
    tok = ctx.tokenizer

    class ArangePositions:
        def __call__(self, texts, **kw):
            batch = tok(texts, **kw)
            batch["position_ids"] = [list(range(len(m))) for m in batch["attention_mask"]]
            return batch

        def __getattr__(self, name):
            return getattr(tok, name)
    ctx._cache["tokenizer"] = ArangePositions()
    (problem,) = kv_cache.batch_vs_alone(ctx)
    assert "positions" in problem.message


def test_far_positions_compare_the_decoded_tail_with_a_recompute(ctx, monkeypatch):
    sabotage_writes(monkeypatch, ctx.engine.cache, lambda slots: slots.numel() == 1)
    (problem,) = kv_cache.far_positions(ctx)
    assert problem.severity == "error" and problem.evidence["tokens"] == 128   # --quick CPU budget
    assert "float32 full recompute" in problem.message


def test_trained_context_reads_phi3_style_and_rope_parameters():
    assert kv_cache.trained_context({"original_max_position_embeddings": 4096}) == 4096
    assert kv_cache.trained_context({"rope_parameters": {"original_max_position_embeddings": 8192}}) == 8192
    assert kv_cache.trained_context({"max_position_embeddings": 4096}) is None
