"""Generation checks on constructed greedy traces, both sides of each heuristic, for a trained model (warnings)
and an untrained one (info only); plus the untrained measure itself on a factory model and on SmolLM2."""
from __future__ import annotations

import math

import pytest

from checks import generation
from checks.analysis.probe_runs import GreedyTrace, forward_runs, looks_untrained, trained_state
from checks.analysis.prompts import ProbeInput
from checks.context import CheckContext

EOS = 99


def test_repeated_ngram_rate():
    assert generation.repeated_ngram_rate(list(range(20))) == 0.0
    assert generation.repeated_ngram_rate([7] * 20) == pytest.approx(1 - 1 / 18)
    assert generation.repeated_ngram_rate([1, 2, 3, 4] * 5) == pytest.approx(1 - 4 / 18)
    assert generation.repeated_ngram_rate([1, 2]) == 0.0


def test_eos_swings_count_crossings_with_hysteresis():
    assert generation.eos_swings([0.5, 0.1, 0.5, 0.1, 0.5]) == 4
    assert generation.eos_swings([0.3, 0.35, 0.3, 0.4, 0.3]) == 0             # noise inside the band
    assert generation.eos_swings([0.01] * 10 + [0.9]) == 1                      # settling on EOS is one move


def test_looks_untrained():
    assert looks_untrained(math.log(512) * 0.95, 512)
    assert not looks_untrained(2.5, 49152)
    assert not looks_untrained(float("nan"), 512)


@pytest.fixture
def ctx(factory_model_dir):
    return CheckContext(factory_model_dir("llama"), quick=False)


def with_traces(ctx, traces, untrained: bool, chat_last: bool = False):
    probes = [ProbeInput(f"probe {i + 1}", "x", (1, 2), chat=chat_last and i == len(traces) - 1)
              for i in range(len(traces))]
    ctx.state["greedy"] = list(zip(probes, traces))
    ctx.state["untrained"] = (untrained, 6.2 if untrained else 2.0)
    return ctx


def trace(tokens, finish="length", eos_probs=None):
    return GreedyTrace((1, 2), list(tokens), eos_probs or [0.01] * len(tokens), finish)


LOOPING = [trace([5, 6, 7] * 8), trace([9] * 24)]
VARIED = [trace(list(range(10, 34))), trace(list(range(40, 64)))]


@pytest.mark.parametrize("untrained, severity", [(False, None), (True, "info")])
def test_repetition_fires_on_loops(ctx, untrained, severity):
    (problem,) = generation.repetition(with_traces(ctx, LOOPING, untrained))
    assert problem.severity == severity and "repeat" in problem.message
    assert ("untrained" in problem.message) == untrained
    assert list(generation.repetition(with_traces(ctx, VARIED, untrained))) == []


@pytest.mark.parametrize("untrained, severity", [(False, None), (True, "info")])
def test_immediate_eos_fires(ctx, untrained, severity):
    eos_first = [trace([EOS], "eos", [0.9]), trace([EOS], "eos", [0.8]), trace(list(range(10, 20)))]
    (problem,) = generation.empty_or_immediate_eos(with_traces(ctx, eos_first, untrained))
    assert problem.severity == severity and "2 of 3" in problem.message
    assert list(generation.empty_or_immediate_eos(with_traces(ctx, VARIED, untrained))) == []


def test_eos_oscillation_fires_only_on_swings(ctx):
    swinging = trace(list(range(10, 22)), eos_probs=[0.5, 0.1, 0.55, 0.15, 0.5, 0.2, 0.6, 0.1] + [0.1] * 4)
    (problem,) = generation.eos_oscillation(with_traces(ctx, [swinging, VARIED[0]], False))
    assert "swings" in problem.message and problem.evidence["eos_probs"][:2] == [0.5, 0.1]
    assert list(generation.eos_oscillation(with_traces(ctx, VARIED, False))) == []


def test_chat_that_never_ends(ctx):
    endless = trace(list(range(10, 42)), "length", [0.001] * 32)
    (problem,) = generation.chat_never_ends(with_traces(ctx, [VARIED[0], endless], False, chat_last=True))
    assert "max_new_tokens" in problem.message
    answered = trace(list(range(10, 18)) + [EOS], "eos", [0.01] * 8 + [0.97])
    assert list(generation.chat_never_ends(with_traces(ctx, [VARIED[0], answered], False, chat_last=True))) == []


def test_factory_model_counts_as_untrained(ctx):
    untrained, nll = trained_state(ctx)
    assert untrained and nll > 0.8 * math.log(ctx.engine.config.vocab_size)
    assert len(forward_runs(ctx)) >= 6


@pytest.mark.assets
def test_smollm2_counts_as_trained(smollm2_dir):
    ctx = CheckContext(smollm2_dir, quick=True)
    untrained, nll = trained_state(ctx)
    assert not untrained and nll < 0.5 * math.log(ctx.engine.config.vocab_size)
