"""SmolLM3 against transformers: NoPE layers (`no_rope_layers` 0) get no rotary embedding, the others do; an
optional window on the NoPE layers. Tiny random-weight models built by transformers (tests/.../tiny_models)."""
from __future__ import annotations

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN
from tests.reference_engine.core.transformers_parity import (bite, check_against_transformers,
                                                        check_batch_equals_alone)

VARIANTS = ["smollm3_nope_gqa", "smollm3_window_interval"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_and_greedy_match_transformers(variant):
    check_against_transformers(variant)


def test_ragged_batch_and_chunked_prefill_match_each_sequence_alone():
    check_batch_equals_alone("smollm3_window_interval")


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_nope_layers_matter(variant):
    """Rotating the NoPE layers too (what an engine assuming RoPE everywhere does) changes the logits."""
    assert bite(variant, positions={"nope_layers": frozenset()}) > 1e-2


def test_healthy_model_passes_the_static_and_engine_checks(factory_model_dir):
    report = run_checks(factory_model_dir("smollm3"), select=FAMILY_RUN, quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "untrained"      # a tiny factory model: measured, not judged
    assert {"WGT001", "WGT003", "GLD002", "ACT001", "ENG001"} <= {r.id for r in report.checks if r.status == "passed"}
