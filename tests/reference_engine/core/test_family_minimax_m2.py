"""MiniMax-M2 against transformers: q/k RMS-normed over the whole projections, partial rotary (`rotary_dim` 8 of
head_dim 16), a sigmoid router whose e_score_correction_bias (drawn N(0, 0.3) here) changes which experts are
picked but not their weights, Mixtral-style w1/w3/w2 experts."""
from __future__ import annotations

import torch

from llmdoctor.run.runner import run_checks
from reference_engine.core.families.base import MoESettings
from reference_engine.core.moe import route
from tests.checks.conftest import STATIC_CATEGORIES, no_crashes, problems
from tests.checks.zoo_engine import ENGINE_CATEGORIES
from tests.reference_engine.core.issue38_models import (bite, check_against_transformers,
                                                        check_batch_equals_alone, core)

VARIANT = "minimax_m2_partial_rotary"


def test_logits_and_greedy_match_transformers():
    check_against_transformers(VARIANT)


def test_ragged_batch_and_chunked_prefill_match_each_sequence_alone():
    check_batch_equals_alone(VARIANT)


def test_the_features_matter():
    """Softmax routing, or routing that ignores the correction bias, is another model; so is rotating all of
    each head."""
    eng = core(VARIANT)
    assert eng.rope.cos.shape[-1] == 8
    assert bite(VARIANT, moe={"method": "softmax_topk"}) > 1e-2
    assert bite(VARIANT, qk_norm=None) > 1e-2


def test_the_correction_bias_picks_but_does_not_weigh():
    moe = MoESettings(num_experts=3, top_k=1, norm_topk_prob=False, cast_weights=False, method="noaux_tc")
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    weights, ids = route(logits, moe, bias=torch.tensor([0.0, 0.0, 5.0]))
    assert ids.tolist() == [[2]] and torch.allclose(weights, torch.sigmoid(torch.tensor([[-1.0]])))


def test_healthy_model_passes_the_static_and_engine_checks(factory_model_dir):
    report = run_checks(factory_model_dir("minimax_m2"), select=STATIC_CATEGORIES + ENGINE_CATEGORIES, quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"WGT001", "WGT003", "GLD002", "ACT001", "ENG001", "MOE001", "MOE003", "MOE004"} <= ran
