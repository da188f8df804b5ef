"""The generate stage carries a hybrid's recurrent state with each sequence: continuous batching under KV
pressure (preempted sequences recomputed from a zero state) gives what each request gets alone, a chunked
prefill carries the state from chunk to chunk, and beam search (forks copy the state) equals transformers' on
LFM2, Granite 4 and Falcon-H1 (K/V and a state in every layer)."""
from __future__ import annotations

import random

import pytest
import torch

from reference_engine.engine import Engine
from reference_engine.generate.loop import generate
from reference_engine.generate.sampling_params import SamplingParams
from reference_engine.generate.scheduler import SchedulerStats
from tests.reference_engine.core.tiny_families import VOCAB
from tests.reference_engine.core.tiny_models import hf_model, model_dir

VARIANTS = ["lfm2_conv3_attn1", "granite4_moe_rope", "falcon_h1_norm_before_gate"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_continuous_batching_with_preemption_matches_alone(variant):
    rng = random.Random(0)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(rng.randint(2, 30))] for _ in range(16)]
    params = [SamplingParams(max_new_tokens=rng.randint(4, 16), ignore_eos=True) for _ in prompts]
    roomy = Engine.from_pretrained(model_dir(variant))
    alone = [roomy.generate(p, sp)[0].token_ids for p, sp in zip(prompts, params)]
    small = Engine.from_pretrained(model_dir(variant), num_blocks=24, block_size=4)    # 96 slots for ~560 tokens
    stats = SchedulerStats()
    batched = generate(small, prompts, params, stats=stats)
    assert [o.token_ids for o in batched] == alone
    assert stats.preemptions > 0 and stats.peak_running > 1
    assert small.cache.sequences() == [] and small.cache.states.states == {} and small.cache.states.pending == {}


@pytest.mark.parametrize("variant", VARIANTS)
def test_beam_search_equals_transformers(variant):
    eng = Engine.from_pretrained(model_dir(variant))
    prompt = [5, 17, 33, 8, 61, 12, 40, 9]
    out = eng.generate(prompt, SamplingParams(num_beams=3, max_new_tokens=12, ignore_eos=True))[0]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        expected = hf_model(variant).generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                              num_beams=3, max_new_tokens=12, min_new_tokens=12,
                                              eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    assert out.token_ids == expected
    assert eng.cache.sequences() == [] and eng.cache.states.states == {}


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunked_prefill_carries_the_state_between_chunks(variant):
    """A prompt prefilled 7 tokens at a time (the recurrent state carried from chunk to chunk) continues as
    one whole prefill does."""
    prompt = [random.Random(3).randrange(3, VOCAB) for _ in range(40)]
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    eng = Engine.from_pretrained(model_dir(variant))
    stats = SchedulerStats()
    chunked = generate(eng, prompt, params, max_prefill_tokens=7, stats=stats)[0].token_ids
    assert chunked == eng.generate(prompt, params)[0].token_ids
    assert stats.prefill_steps == 6 and eng.cache.states.states == {}
