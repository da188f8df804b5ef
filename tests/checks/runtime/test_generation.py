"""Generation checks on constructed greedy traces, both sides of each heuristic, for a trained model (warnings)
and one whose weights are still at their initialisation (info only); plus that verdict itself, decided from the
weights: factory and transformers-initialised models are untrained, the demo model and SmolLM2 are trained, and
each statistic (scale, tail, norm gains, NaN) can on its own make a checkpoint count as trained."""
from __future__ import annotations

import pytest
import torch

from checks.runtime import generation
from checks.shared.weights import init_stats
from checks.shared.weights.init_stats import InitVerdict, init_state, judge
from checks.shared.probe_runs import GreedyTrace
from checks.shared.prompts import ProbeInput
from checks.shared.weights.tensor_scan import TensorStats
from checks.catalogue.inputs import CheckInputs
from llmdoctor.cli import DEMO_MODEL

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


@pytest.fixture
def ctx(factory_model_dir):
    return CheckInputs(factory_model_dir("llama"), quick=False)


def with_traces(ctx, traces, untrained: bool, chat_last: bool = False):
    probes = [ProbeInput(f"probe {i + 1}", "x", (1, 2), chat=chat_last and i == len(traces) - 1)
              for i in range(len(traces))]
    ctx.state["greedy"] = list(zip(probes, traces))
    ctx.state[init_stats.STATE_KEY] = InitVerdict(untrained, "constructed", 0, 0.02)
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


def stats(name: str, values: torch.Tensor) -> TensorStats:
    v = values.double()
    finite = v[torch.isfinite(v)]
    return TensorStats(name, "F32", v.numel(), nan=int(v.isnan().sum()), inf=int(v.isinf().sum()),
                       amax=float(finite.abs().max()), sumsq=float((finite ** 2).sum()))


def fresh(gen, shape=(64, 64), std=0.02):
    return std * torch.randn(shape, generator=gen)


@pytest.mark.parametrize("change, words", [
    (lambda t: {**t, "q": t["q"] * 3.0}, "initializer_range"),               # trained scale
    (lambda t: {**t, "q": t["q"].index_put_((torch.tensor([0]), torch.tensor([0])), torch.tensor(0.5))},
     "normal draw"),                                                          # one outlier weight: a heavy tail
    (lambda t: {**t, "norm": t["norm"] * 0.4}, "norm gain"),                 # norm gains drifted from 1
    (lambda t: {**t, "q": t["q"].index_put_((torch.tensor([0]), torch.tensor([0])), torch.tensor(float("nan")))},
     "NaN"),                                                                  # broken is not untrained
])
def test_each_statistic_alone_marks_weights_as_trained(change, words):
    gen = torch.Generator().manual_seed(0)
    tensors = {"q": fresh(gen), "k": fresh(gen, (32, 64)), "norm": torch.ones(64)}
    names = {"q": "model.layers.0.self_attn.q_proj.weight", "k": "model.layers.0.self_attn.k_proj.weight",
             "norm": "model.layers.0.input_layernorm.weight"}
    shapes = {names[k]: tuple(v.shape) for k, v in tensors.items()}
    at_init = judge({names[k]: stats(names[k], v) for k, v in tensors.items()}, shapes, 0.02)
    assert at_init.untrained, at_init.reason
    broken = change({k: v.clone() for k, v in tensors.items()})
    verdict = judge({names[k]: stats(names[k], v) for k, v in broken.items()}, shapes, 0.02)
    assert not verdict.untrained and words in verdict.reason
    assert verdict.evidence()["weights_at_initialisation"] is False and verdict.evidence()["not_at_init"]


def test_no_float_matrix_means_no_untrained_verdict():
    verdict = judge({"model.norm.weight": stats("model.norm.weight", torch.ones(8))},
                    {"model.norm.weight": (8,)}, 0.02)
    assert not verdict.untrained and "quantized" in verdict.reason


@pytest.mark.parametrize("preset, overrides", [("llama", {}), ("qwen3", {"tie_word_embeddings": True,
                                                                        "torch_dtype": "bfloat16"})])
def test_factory_models_are_at_initialisation(factory_model_dir, preset, overrides):
    verdict = init_state(CheckInputs(factory_model_dir(preset, **overrides), quick=True))
    assert verdict.untrained and verdict.judged >= 10, verdict.reason


def test_transformers_initialised_model_is_at_initialisation(tmp_path):
    from tests.hf_models import build_hf_model
    verdict = init_state(CheckInputs(build_hf_model(tmp_path / "m", "llama_gqa4_tied_bias"), quick=True))
    assert verdict.untrained, verdict.reason


def test_demo_model_is_trained():
    verdict = init_state(CheckInputs(DEMO_MODEL, quick=True))
    assert not verdict.untrained and "initializer_range" in verdict.reason


@pytest.mark.assets
def test_smollm2_counts_as_trained(smollm2_dir):
    verdict = init_state(CheckInputs(smollm2_dir, quick=True))
    assert not verdict.untrained


def test_verdict_never_looks_at_the_outputs(factory_model_dir):
    """The verdict is made from the weight files alone: no engine is built, no probe is run."""
    ctx = CheckInputs(factory_model_dir("llama"), quick=True)
    init_state(ctx)
    assert "engine" not in ctx._cache and not any(isinstance(k, tuple) and k[0] == "forward" for k in ctx.state)


def test_a_full_size_model_at_its_initialisation_keeps_the_severity(ctx, monkeypatch):
    """From MIN_JUDGED_PARAMETERS up, weights at initialisation are a conversion that lost them: the warning
    stands, and the message names the initialisation."""
    monkeypatch.setattr(init_stats, "parameter_count", lambda ctx: 60_000_000)
    (problem,) = generation.repetition(with_traces(ctx, LOOPING, untrained=True))
    assert problem.severity is None and problem.message.startswith("weights still at their initialisation in a 60M")
    assert problem.evidence["parameters"] == 60_000_000


def test_weights_that_cannot_be_judged_keep_the_severity(factory_model_dir, monkeypatch):
    ctx = CheckInputs(factory_model_dir("llama"), quick=True)
    monkeypatch.setattr(init_stats, "scan_weights", lambda *a, **k: (_ for _ in ()).throw(OSError("short read")))
    verdict = init_state(ctx)
    assert not verdict.untrained and "could not be judged (OSError: short read)" in verdict.reason
