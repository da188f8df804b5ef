"""MiniMax-M2 against transformers: q/k RMS-normed over the whole projections, partial rotary (`rotary_dim` 8 of
head_dim 16), a sigmoid router whose e_score_correction_bias (drawn N(0, 0.3) here) changes which experts are
picked but not their weights, Mixtral-style w1/w3/w2 experts."""
from __future__ import annotations

import torch

from llmdoctor.run.runner import run_checks
from reference_engine.core.families.base import MoESettings
from reference_engine.core.moe import route
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN
from tests.reference_engine.core.transformers_parity import (bite, check_against_transformers,
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
    assert bite(VARIANT, attention={"qk_norm": None}) > 1e-2


def test_the_correction_bias_picks_but_does_not_weigh():
    moe = MoESettings(num_experts=3, top_k=1, norm_topk_prob=False, cast_weights=False, method="noaux_tc")
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    weights, ids = route(logits, moe, bias=torch.tensor([0.0, 0.0, 5.0]))
    assert ids.tolist() == [[2]] and torch.allclose(weights, torch.sigmoid(torch.tensor([[-1.0]])))


def test_healthy_model_passes_the_static_and_engine_checks(factory_model_dir):
    report = run_checks(factory_model_dir("minimax_m2"), select=FAMILY_RUN, quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "untrained"      # a tiny factory model: measured, not judged
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"WGT001", "WGT003", "GLD002", "ACT001", "ENG001", "MOE001", "MOE003", "MOE004"} <= ran


def test_a_correction_bias_that_starves_an_expert_is_a_dead_expert(factory_model_dir, tmp_path):
    """MOE004 counts the picks the engine makes, bias included: a bias of -20 on expert 0 (it can never win)
    leaves it dead though its router logits look like its siblings'."""
    import shutil

    from safetensors.torch import load_file, save_file
    d = tmp_path / "model"
    shutil.copytree(factory_model_dir("minimax_m2"), d)
    weights = load_file(d / "model.safetensors")
    for name in weights:
        if name.endswith("e_score_correction_bias"):
            weights[name] = torch.tensor([-20.0, 0.0, 0.0, 0.0])
    save_file(weights, d / "model.safetensors", metadata={"format": "pt"})
    report = run_checks(d, select=["MOE004"], quick=True, device="cpu")
    no_crashes(report)
    assert [f.check for f in report.findings if f.severity.value == "warning"] == ["MOE004"] * 2   # both layers
    assert all("expert 0" in f.message for f in report.findings)
