"""Llama 4 text against transformers: chunked local attention (chunks of 16, sequences of 256) on the RoPE
layers, a NoPE layer with attention temperature tuning (floor_scale 8, so it changes every 8 positions), q/k
l2-norm on the RoPE layers, interleaved-pair RoPE with llama3 scaling, and every second layer a MoE whose sigmoid
top-1 score scales the expert's input, beside a shared expert; dense layers of intermediate_size_mlp."""
from __future__ import annotations

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN
from tests.reference_engine.core.transformers_parity import (bite, check_against_transformers,
                                                        check_batch_equals_alone, core)

VARIANT = "llama4_chunked_nope_moe"


def test_logits_and_greedy_match_transformers():
    check_against_transformers(VARIANT)


def test_ragged_batch_and_chunked_prefill_match_each_sequence_alone():
    check_batch_equals_alone(VARIANT)


def test_every_feature_matters():
    """Each feature turned off (or done the usual Llama way) moves the logits: the tiny model tests them all."""
    s = core(VARIANT).config.family.settings
    assert s.positions.nope_layers == frozenset({2}) and s.attention.chunked_layers == frozenset({0, 1, 3})
    assert s.moe.sparse_layers == frozenset({1, 3})
    for change in ({"positions": {"nope_layers": frozenset()}}, {"attention": {"chunk": None}},
                   {"attention": {"qk_l2_norm": False}}, {"positions": {"temperature": None}},
                   {"positions": {"interleaved": False}}, {"moe": {"scale_input": False}}):
        assert bite(VARIANT, **change) > 1e-3, change


def test_healthy_model_passes_the_static_and_engine_checks(factory_model_dir):
    report = run_checks(factory_model_dir("llama4"), select=FAMILY_RUN, quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "untrained"      # a tiny factory model: measured, not judged
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"WGT001", "WGT003", "GLD002", "ACT001", "ENG001", "MOE001", "MOE003"} <= ran
