"""LongRoPE (Phi-3.5, Phi-4-mini) picks its factors by the length of the sequence: the short ones while it is
within original_max_position_embeddings, the long ones for every position once it is past. transformers' Phi-3
generate drops its cache when a sequence first crosses, so the whole sequence is recomputed with the long
factors; the engine does the same (a crossing step recomputes the sequence's history), and picks the factors per
sequence in a batch. The model is a factory Phi-3; transformers is the oracle."""
from __future__ import annotations

import pytest
import torch

from reference_engine.streaming.scripted import chunked_then_decoded, run_scripts
from reference_engine.streaming.streaming_core import StreamingCore
from reference_engine.core import CoreEngine
from tests.hf_models import hf_logits
from tests.reference_engine.core.greedy import greedy, hf_greedy

TOL = 1e-4
ORIGINAL = 64
LONGROPE = dict(max_position_embeddings=256, original_max_position_embeddings=ORIGINAL, initializer_range=0.1,
                rope_scaling={"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(8)],
                              "long_factor": [1.0 + 0.5 * i for i in range(8)]})


@pytest.fixture(scope="module")
def phi3(tmp_path_factory):
    from reference_engine.testing.factory import build_model_dir
    return build_model_dir(tmp_path_factory.mktemp("phi3") / "model", "phi3", seed=3, **LONGROPE)


@pytest.fixture(scope="module")
def hf(phi3):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(phi3, dtype=torch.float32).eval()


def ids(n: int, seed: int) -> list[int]:
    return torch.randint(10, 400, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_the_oracle_switches_factors(phi3, hf):
    """The model really has two factor sets: the first 40 positions of a 100-token sequence differ from the
    same 40 tokens alone (else nothing below could fail)."""
    seq = ids(100, 0)
    assert (hf_logits(hf, seq)[:40] - hf_logits(hf, seq[:40])).abs().max() > 1e-2


@pytest.mark.parametrize("streaming", [False, True])
def test_chunked_prefill_and_decode_across_the_switch_equal_a_recompute(phi3, hf, streaming):
    """What the far-position check (KVC003) runs: chunks of 32 up to 124 tokens, 4 decode steps to 128."""
    eng = (StreamingCore if streaming else CoreEngine).from_pretrained(phi3)
    seq = ids(128, 1)
    steps = run_scripts(eng, [chunked_then_decoded(seq, 124, 32)])[0]
    theirs = hf_logits(hf, seq)
    assert (steps[-1][0] - theirs[-1]).abs().max() <= TOL
    assert (steps[1][0] - hf_logits(hf, seq[:64])[-1]).abs().max() <= TOL      # 64 tokens: still short
    assert eng.cache.stats().used_blocks == 0


def test_greedy_across_the_switch_equals_transformers_generate(phi3, hf):
    eng = CoreEngine.from_pretrained(phi3)
    prompt = ids(50, 2)                                    # 50 -> 80 tokens: crosses 64 while decoding
    assert greedy(eng, prompt, 30) == hf_greedy(hf, prompt, 30)
    assert eng.cache.stats().used_blocks == 0 and eng.cache.validate() == []


def test_without_the_recompute_the_engine_would_disagree(phi3, hf):
    """The recompute is what makes the two agree: stale short-factor K/V give a different last row."""
    eng = CoreEngine.from_pretrained(phi3)
    eng.rope.restart_at = None
    seq = ids(80, 4)
    with eng.scratch() as (s,):
        eng.prefill([s], [seq[:60]])
        last = eng.prefill([s], [seq[60:]])
    assert (last[0] - hf_logits(hf, seq)[-1]).abs().max() > 1e-3


def test_a_batch_picks_factors_per_sequence(phi3, hf):
    eng = CoreEngine.from_pretrained(phi3, block_size=4)
    long, short = ids(100, 5), ids(20, 6)
    rows = eng.prefill([0, 1], [long, short], all_logits=True).split([100, 20])
    assert (rows[0] - hf_logits(hf, long)).abs().max() <= TOL
    assert (rows[1] - hf_logits(hf, short)).abs().max() <= TOL
    eng.prefill([2], [long[:60]])                          # a crossing step batched with a plain decode
    rows = eng.prefill([2, 1], [long[60:], [7]], all_logits=True)
    assert rows.shape[0] == 41
    assert (rows[:40] - hf_logits(hf, long)[60:]).abs().max() <= TOL
    assert (rows[40] - hf_logits(hf, short + [7])[-1]).abs().max() <= TOL


def test_prefix_cache_never_serves_long_factor_blocks_to_a_short_sequence(phi3, hf):
    eng = CoreEngine.from_pretrained(phi3, prefix_caching=True)
    seq = ids(120, 7)
    eng.prefill([0], [seq])                                # long from its first step: blocks hold long K/V
    short = eng.prefill([1], [seq[:40]])
    assert (short[0] - hf_logits(hf, seq[:40])[-1]).abs().max() <= TOL
    eng.prefill([2], [seq[:48]])                           # short: its full blocks are registered
    grown = eng.prefill([3], [seq[:100]])                  # shares them, then crosses: recomputed
    assert (grown[0] - hf_logits(hf, seq[:100])[-1]).abs().max() <= TOL
