"""Continuous batching under KV pressure: same greedy outputs as alone, preemptions happen, nothing leaks."""
import random

import pytest

from reference_engine.generate.loop import generate
from reference_engine.generate.sampling_params import SamplingParams
from reference_engine.generate.scheduler import SchedulerStats
from tests.reference_engine.generate.generate_models import engine


def random_requests(n: int, seed: int, vocab: int):
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(2, 40))] for _ in range(n)]
    params = [SamplingParams(max_new_tokens=rng.randint(1, 24), ignore_eos=rng.random() < 0.5) for _ in range(n)]
    return prompts, params


def test_64_requests_in_a_small_pool_match_running_alone():
    roomy = engine("llama")
    prompts, params = random_requests(64, seed=0, vocab=500)
    alone = [roomy.generate(p, sp)[0] for p, sp in zip(prompts, params)]

    small = engine("llama", num_blocks=40, block_size=4)  # 160 slots; the requests need ~2,500 together
    stats = SchedulerStats()
    batched = generate(small, prompts, params, stats=stats)
    assert [o.token_ids for o in batched] == [o.token_ids for o in alone]
    assert [o.finish_reason for o in batched] == [o.finish_reason for o in alone]
    assert stats.preemptions > 0 and stats.peak_running > 1
    assert small.cache.allocator.num_used == 0 and small.cache.sequences() == []
    assert small.cache.validate() == []


def test_sampled_requests_survive_preemption():
    """A seeded sampled request draws the same tokens whether or not it was preempted and recomputed."""
    prompts, _ = random_requests(12, seed=1, vocab=500)
    params = [SamplingParams(temperature=1.0, seed=i, max_new_tokens=20, ignore_eos=True) for i in range(12)]
    alone = [engine("llama").generate(p, sp)[0].token_ids for p, sp in zip(prompts, params)]
    small = engine("llama", num_blocks=24, block_size=4)
    stats = SchedulerStats()
    batched = generate(small, prompts, params, stats=stats)
    assert stats.preemptions > 0
    assert [o.token_ids for o in batched] == alone


@pytest.mark.parametrize("max_num_seqs", [1, 3])
def test_max_num_seqs_caps_the_batch(max_num_seqs):
    prompts, params = random_requests(6, seed=2, vocab=500)
    stats = SchedulerStats()
    generate(engine("llama"), prompts, params, max_num_seqs=max_num_seqs, stats=stats)
    assert stats.peak_running == max_num_seqs


def test_a_failing_step_leaves_the_cache_empty(monkeypatch):
    eng = engine("llama")
    real, calls = eng.decode, []

    def flaky(seq_ids, token_ids, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("device fell over")
        return real(seq_ids, token_ids, **kw)

    monkeypatch.setattr(eng, "decode", flaky)
    prompts, params = random_requests(5, seed=3, vocab=500)
    with pytest.raises(RuntimeError, match="fell over"):
        generate(eng, prompts, params)
    assert eng.cache.allocator.num_used == 0 and eng.cache.sequences() == []


def test_mixed_kinds_in_one_call():
    eng = engine("llama")
    prompt = [5, 6, 7, 8]
    kinds = [SamplingParams(max_new_tokens=8, ignore_eos=True), SamplingParams(num_beams=3, max_new_tokens=8),
             SamplingParams(temperature=0.8, seed=2, max_new_tokens=8, ignore_eos=True)]
    together = generate(eng, [prompt] * 3, kinds)
    assert [o.token_ids for o in together] == [generate(eng, prompt, k)[0].token_ids for k in kinds]
    assert eng.cache.allocator.num_used == 0
