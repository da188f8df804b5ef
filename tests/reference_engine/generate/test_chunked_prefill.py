"""Chunked prefill in the generate loop: a prompt longer than max_prefill_tokens runs in steps of at most that
many tokens through the paged cache, and greedy decoding after it gives the tokens one whole prefill gives (the
logprobs within float tolerance: the products are split differently); under KV pressure too."""
import random

import pytest
import torch

from reference_engine.generate.loop import generate
from reference_engine.generate.sampling_params import SamplingParams
from reference_engine.generate.scheduler import SchedulerStats
from tests.reference_engine.generate.generate_models import engine

GREEDY = SamplingParams(max_new_tokens=12, ignore_eos=True, logprobs=True)


def prefill_sizes(eng, monkeypatch) -> list[int]:
    """The number of prompt tokens each engine prefill step runs, recorded as the loop calls it."""
    sizes, real = [], eng.prefill

    def counted(seq_ids, token_lists, **kw):
        sizes.append(sum(len(t) for t in token_lists))
        return real(seq_ids, token_lists, **kw)
    monkeypatch.setattr(eng, "prefill", counted)
    return sizes


def assert_same_greedy(chunked, whole):
    assert [o.token_ids for o in chunked] == [o.token_ids for o in whole]
    for a, b in zip(chunked, whole):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_a_long_prompt_is_prefilled_in_bounded_steps_with_the_same_tokens(monkeypatch):
    eng = engine("llama")
    prompt = [random.Random(0).randrange(3, 500) for _ in range(150)]
    whole = eng.generate(prompt, GREEDY)
    sizes = prefill_sizes(eng, monkeypatch)
    stats = SchedulerStats()
    chunked = generate(eng, prompt, GREEDY, max_prefill_tokens=16, stats=stats)
    assert_same_greedy(chunked, whole)
    assert sizes == [16] * 9 + [6]                  # 150 tokens: nine full chunks and the rest
    assert stats.prefill_steps == 10 and stats.prefill_tokens == 150 and stats.decode_steps == 11
    assert eng.cache.allocator.num_used == 0 and eng.cache.sequences() == []


def test_a_batch_under_kv_pressure_keeps_every_step_within_the_budget(monkeypatch):
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 500) for _ in range(n)] for n in (70, 9, 33, 5, 48)]
    whole = [engine("llama").generate(p, GREEDY)[0] for p in prompts]
    small = engine("llama", num_blocks=26, block_size=4)   # 104 slots for 225 tokens: a preemption, recomputed
    sizes = prefill_sizes(small, monkeypatch)
    stats = SchedulerStats()
    chunked = generate(small, prompts, GREEDY, max_prefill_tokens=24, stats=stats)
    assert_same_greedy(chunked, whole)
    assert max(sizes) <= 24 and stats.preemptions > 0
    assert small.cache.allocator.num_used == 0 and small.cache.validate() == []


def test_a_step_budget_below_one_token_is_refused():
    with pytest.raises(ValueError, match="max_prefill_tokens"):
        generate(engine("llama"), [5, 6, 7], GREEDY, max_prefill_tokens=0)
