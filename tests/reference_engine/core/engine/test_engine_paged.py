"""The engine over the paged cache: incremental decode == full recompute, block-size and compaction
invariance, forks with copy-on-write, failed steps leave the cache unchanged."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core.cache.kv_cache import CacheFullError
from tests.reference_engine.core.tiny_models import any_ids, engine

TOL = 1e-4


@pytest.mark.parametrize("variant,steps", [("qwen3_qknorm_odd_head_dim", 200), ("mistral_gqa3_window", 60)])
def test_decode_steps_equal_full_recompute(variant, steps):
    # 200 steps; the sliding-window model decodes well past its window of 24
    eng = engine(variant, block_size=16)
    tokens = any_ids(12, seed=5)
    step_logits = [eng.prefill([0], [tokens])[0]]
    for i in range(steps):
        tokens.append(int(step_logits[-1].argmax()) if i % 3 else any_ids(1, seed=100 + i)[0])
        step_logits.append(eng.decode([0], [tokens[-1]])[0])
    full = eng.logits(tokens)
    incremental = torch.stack(step_logits)                       # logits after 12, 13, ..., 212 tokens
    assert (incremental - full[11:]).abs().max().item() <= TOL
    assert eng.cache.length(0) == len(tokens) == 12 + steps and eng.validate() == []


def _scenario(eng, compact_before_last: bool = False) -> list[torch.Tensor]:
    """Interleaved multi-sequence work: prefills, forks, frees and batched decodes; returns every output."""
    out = [eng.prefill([0, 1, 2], [any_ids(n, seed=n) for n in (21, 3, 40)])]
    for i in range(6):
        out.append(eng.decode([0, 1, 2], [i, i + 1, i + 2]))
    eng.fork(0, 3)
    eng.free(1)                                                  # leaves holes in the pool
    out.append(eng.prefill([3, 4], [[5, 6, 7], any_ids(17, seed=9)]))
    for i in range(5):
        out.append(eng.decode([0, 2, 3, 4], [i, 2 * i, 3 * i, 4 * i]))
    if compact_before_last:
        eng.moved = {old: new for old, new in eng.cache.compact().items() if old != new}
    out.append(eng.decode([0, 2, 3, 4], [1, 2, 3, 4]))
    assert eng.validate() == []
    return out


def test_block_sizes_1_16_256_give_identical_logits():
    runs = [_scenario(engine("mistral_gqa3_window", block_size=bs)) for bs in (1, 16, 256)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)


def test_compaction_changes_no_logits():
    eng_a, eng_b = engine("llama_gqa4_tied_bias", block_size=4), engine("llama_gqa4_tied_bias", block_size=4)
    plain, compacted = _scenario(eng_a), _scenario(eng_b, compact_before_last=True)
    assert len(eng_b.moved) > 5                                  # compaction really moved blocks around
    assert eng_a.cache.block_table(0) != eng_b.cache.block_table(0)
    for a, b in zip(plain, compacted):
        assert torch.equal(a, b)


def test_forked_sequences_diverge_through_copy_on_write():
    eng = engine("qwen2_mqa_bias", block_size=8)
    prompt = any_ids(13, seed=2)                              # ends inside a block: the fork shares it
    eng.prefill(["p"], [prompt])
    eng.fork("p", "c")
    assert eng.cache.stats().shared_blocks == 2
    got = eng.decode(["p", "c"], [1, 2])
    got2 = eng.decode(["p", "c"], [3, 4])
    assert (got[0] - eng.logits(prompt + [1])[-1]).abs().max() <= TOL
    assert (got[1] - eng.logits(prompt + [2])[-1]).abs().max() <= TOL
    assert (got2[1] - eng.logits(prompt + [2, 4])[-1]).abs().max() <= TOL
    eng.free("p")
    eng.free("c")
    assert eng.cache.stats().used_blocks == 0 and eng.validate() == []


def test_chunked_prefill_equals_one_prefill():
    eng = engine("mistral_gqa3_window", block_size=4)
    ids = any_ids(70, seed=4)
    whole = eng.logits(ids)
    chunks = [eng.prefill([0], [ids[a:b]], all_logits=True) for a, b in ((0, 30), (30, 31), (31, 70))]
    assert (torch.cat(chunks) - whole).abs().max().item() <= TOL


def test_a_step_that_does_not_fit_changes_nothing():
    eng = engine("llama_mha_untied", num_blocks=4, block_size=4)
    eng.prefill([0], [any_ids(10)])
    before = (eng.cache.block_table(0), eng.cache.length(0), eng.cache.allocator.num_free)
    with pytest.raises(CacheFullError):
        eng.prefill([0, 1], [[1, 2, 3], any_ids(5)])
    assert 1 not in eng.cache
    assert (eng.cache.block_table(0), eng.cache.length(0), eng.cache.allocator.num_free) == before
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.decode([0], [10**6])
    with pytest.raises(KeyError):
        eng.decode([7], [1])
    assert eng.cache.length(0) == 10 and eng.validate() == []


def test_a_failing_step_is_rolled_back():
    eng = engine("llama_mha_untied", block_size=4)
    eng.prefill([0], [any_ids(6)])

    def boom(layer, module, x):
        if layer == 1 and module == "mlp":
            raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        eng.prefill([0, 1], [[1, 2, 3], [4, 5]], capture=boom)
    assert eng.cache.sequences() == [0] and eng.cache.length(0) == 6 and eng.validate() == []


def test_prefix_caching_reuses_blocks_and_changes_no_logits():
    cached, plain = engine("qwen2_mqa_bias", block_size=8, prefix_caching=True), engine("qwen2_mqa_bias", block_size=8)
    system = any_ids(27, seed=11)
    prompts = [system + any_ids(5, seed=20 + i) for i in range(3)]
    first = cached.prefill([0], [prompts[0]])
    assert cached.cache.prefix.hits == 0
    cached.free(0)
    both = cached.prefill([1, 2], prompts[1:])                   # 3 full blocks of the system prompt reused
    assert cached.cache.prefix.hits == 2 and cached.cache.stats().shared_blocks == 3
    reference = plain.prefill([0, 1, 2], prompts)
    assert (torch.cat([first, both]) - reference).abs().max().item() <= TOL
    step = cached.decode([1, 2], [3, 4])
    assert (step - plain.decode([1, 2], [3, 4])).abs().max().item() <= TOL
    assert cached.validate() == []
