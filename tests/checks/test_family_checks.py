"""Healthy models of the new engine families (factory presets: Gemma 2, Gemma 3, Mixtral, Qwen2-MoE, gpt-oss) pass
the static and engine checks with no warning or error, and the MoE/conversion checks actually run on them."""
from __future__ import annotations

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN


@pytest.mark.parametrize("preset", ["gemma2", "gemma3", "mixtral", "qwen2_moe", "gpt_oss"])
def test_healthy_family_model_is_clean(preset, factory_model_dir):
    report = run_checks(factory_model_dir(preset), select=FAMILY_RUN, quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "untrained"      # a tiny factory model: measured, not judged
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"WGT001", "WGT003", "GLD002", "ACT001", "CNV001"} <= ran
    if preset in ("mixtral", "qwen2_moe", "gpt_oss"):
        assert {"MOE001", "MOE002", "MOE003", "MOE004", "MOE005"} <= ran
    if preset == "gemma2":
        assert "CNV002" in ran
