"""The logits-processor pipeline against transformers' processors, and the sampler's empirical distributions
against the analytically filtered distribution (chi-square, fixed seeds)."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers.generation import logits_process as hf_logits_process

from reference_engine.generate.sampler import (apply_min_p, apply_repetition_penalty, apply_top_k, apply_top_p, choose,
                                      entropy_temperature, make_generator, process_logits, sample,
                                      validate_distribution)
from reference_engine.generate.sampling_params import SamplingParams

VOCAB = 12


def fixed_logits(seed=0, vocab=VOCAB):
    return torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * 2.0


# ---------------------------------------------------------------------------------------------- vs transformers

@pytest.mark.parametrize("seed", range(20))
def test_processors_match_transformers(seed):
    logits = fixed_logits(seed, vocab=64)
    row = logits[None, :]
    ids = torch.tensor([[1, 5, 5, 9, 63]])
    hf = hf_logits_process
    assert torch.equal(apply_repetition_penalty(logits, ids[0], 1.3),
                       hf.RepetitionPenaltyLogitsProcessor(1.3)(ids, row.clone())[0])
    for k in (1, 5, 63):
        assert torch.equal(apply_top_k(logits, k).isinf(), hf.TopKLogitsWarper(k)(ids, row.clone())[0].isinf())
    for p in (0.1, 0.5, 0.9, 0.99):
        assert torch.equal(apply_top_p(logits, p).isinf(), hf.TopPLogitsWarper(p)(ids, row.clone())[0].isinf())
    for m in (0.01, 0.2, 0.9):
        assert torch.equal(apply_min_p(logits, m).isinf(), hf.MinPLogitsWarper(m)(ids, row.clone())[0].isinf())


# ---------------------------------------------------------------------------------------------- distributions

def analytic(logits, t=1.0, k=0, p=1.0, min_p=0.0):
    """The filtered distribution, computed independently in float64 with plain Python sorting."""
    x = (logits.double() / t).tolist()
    order = sorted(range(len(x)), key=lambda i: -x[i])
    keep = set(order[:k]) if k else set(order)
    keep |= {i for i in range(len(x)) if k and x[i] == x[order[k - 1]]}
    z = sum(math.exp(x[i]) for i in keep)
    mass = 0.0
    for i in [j for j in order if j in keep]:
        if mass >= p:
            keep.discard(i)
        mass += math.exp(x[i]) / z
    top = max(x[i] for i in keep)
    keep = {i for i in keep if math.exp(x[i] - top) >= min_p}
    z = sum(math.exp(x[i]) for i in keep)
    return [math.exp(x[i]) / z if i in keep else 0.0 for i in range(len(x))]


def chi_square_pvalue(counts, probs):
    n = sum(counts)
    assert all(c == 0 for c, q in zip(counts, probs) if q == 0.0), "drew a token the filter removed"
    cells = [(c, q * n) for c, q in zip(counts, probs) if q * n >= 5]
    rare = [(c, q * n) for c, q in zip(counts, probs) if 0 < q * n < 5]
    if rare:  # pool the rare tokens into one cell, the textbook rule for expected counts below 5
        cells.append((sum(c for c, _ in rare), sum(e for _, e in rare)))
    assert len(cells) >= 2 and sum(e for _, e in cells) > 0.99 * n
    stat = sum((c - e) ** 2 / e for c, e in cells)
    df = len(cells) - 1
    if df == 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def draw(params, logits, n=20000, seed=1234):
    logprobs = process_logits(logits, params)
    gen = make_generator(seed, "cpu")
    counts = [0] * logits.shape[-1]
    for _ in range(n):
        counts[sample(logprobs, gen)] += 1
    return counts


CASES = [
    dict(t=0.7), dict(t=1.5), dict(t=1.0, k=4), dict(t=1.0, p=0.6), dict(t=0.8, min_p=0.15),
    dict(t=1.2, k=8, p=0.9, min_p=0.05),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_empirical_distribution_matches_filtered(case):
    logits = fixed_logits(3)
    params = SamplingParams(temperature=case["t"], top_k=case.get("k", 0), top_p=case.get("p", 1.0),
                            min_p=case.get("min_p", 0.0))
    counts = draw(params, logits)
    assert chi_square_pvalue(counts, analytic(logits, **case)) > 1e-4


def test_chi_square_has_power():
    """The same draws reject a slightly wrong temperature: the sample size is enough to tell them apart."""
    logits = fixed_logits(3)
    counts = draw(SamplingParams(temperature=1.0, top_p=0.9), logits)
    assert chi_square_pvalue(counts, analytic(logits, t=1.0, p=0.9)) > 1e-4
    assert chi_square_pvalue(counts, analytic(logits, t=1.1, p=0.9)) < 1e-6


def test_top_k_one_is_greedy():
    for seed in range(30):
        logits = fixed_logits(seed, vocab=50)
        choice = choose(logits, SamplingParams(temperature=1.3, top_k=1), None, make_generator(seed, "cpu"))
        assert choice.token_id == int(torch.argmax(logits)) and choice.logprob == 0.0


def test_seeded_generator_is_reproducible():
    logits = fixed_logits(5)
    lp = process_logits(logits, SamplingParams(temperature=1.0))
    a, b = make_generator(7, "cpu"), make_generator(7, "cpu")
    assert [sample(lp, a) for _ in range(50)] == [sample(lp, b) for _ in range(50)]


# ---------------------------------------------------------------------------------------------- numerics

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_logits_are_stable(dtype):
    logits = torch.tensor([60000.0, 59990.0, -60000.0, 0.0] + [100.0] * 8).to(dtype)
    for params in (SamplingParams(), SamplingParams(temperature=0.05, top_p=0.9),
                   SamplingParams(temperature=2.0, top_k=3, min_p=0.01)):
        lp = process_logits(logits, params)
        assert lp.dtype == torch.float32 and not torch.isnan(lp).any()
        assert abs(float(lp.exp().sum()) - 1.0) < 1e-5
        assert validate_distribution(lp, params, logits) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-30, 30), min_size=2, max_size=40), st.floats(0.05, 1.0), st.floats(0.1, 3.0))
def test_top_p_keeps_at_least_p(values, p, t):
    logits = torch.tensor(values)
    params = SamplingParams(temperature=t, top_p=p)
    lp = process_logits(logits, params)
    kept = torch.isfinite(lp)
    assert kept.any()
    assert float(torch.softmax(logits / t, -1)[kept].sum()) >= p - 1e-5
    assert validate_distribution(lp, params, logits) == []


def test_validate_distribution_flags_problems():
    logits = fixed_logits(0)
    assert validate_distribution(torch.full((VOCAB,), float("-inf")), SamplingParams(), logits)
    broken = process_logits(logits, SamplingParams(temperature=1.0, top_p=0.9))
    broken[torch.isfinite(broken)] = math.log(0.5)  # not normalised
    assert any("sum" in p for p in validate_distribution(broken, SamplingParams(temperature=1.0), logits))
    greedy_only = torch.full((VOCAB,), float("-inf"))
    greedy_only[int(torch.argmin(logits))] = 0.0   # the least likely token alone cannot hold 0.9 of the mass
    assert any("top-p" in p for p in validate_distribution(greedy_only, SamplingParams(temperature=1.0, top_p=0.9),
                                                           logits))


def test_dynamic_temperature_follows_entropy():
    flat, peaked = torch.zeros(100), torch.tensor([50.0] + [0.0] * 99)
    assert entropy_temperature(flat, 0.5, 0.9) == pytest.approx(0.5)
    assert entropy_temperature(peaked, 0.5, 0.9) == pytest.approx(0.9, abs=1e-3)
