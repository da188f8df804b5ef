"""Healthy Qwen3-Next / Qwen3.5 models (built by transformers, with a tokenizer) pass the static and engine checks
with no warning or error: the golden steps, activations, numerics, generation and the engine self-tests all run
through the Gated DeltaNet layers and their recurrent states. (~30 s on a loaded 2-core machine.)"""
from __future__ import annotations

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN
from tests.reference_engine.core.tiny_models import checkable_dir


@pytest.mark.parametrize("variant", ["next_moe_interval", "qwen35_dense_tied"])
def test_healthy_hybrid_model_is_clean(variant):
    report = run_checks(checkable_dir(variant), select=FAMILY_RUN, quick=True, device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "too small"     # norms drawn away from 1: not at init, under 50M
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"CFG050", "CFG051", "CFG052", "CFG053", "WGT001", "WGT003", "GLD002", "ACT001", "ENG001",
            "ENG002"} <= ran


@pytest.mark.assets
@pytest.mark.parametrize("arch", ["qwen3next", "qwen35moe"])
def test_healthy_hybrid_gguf_is_clean(arch):
    """`llmdoctor check` on the pinned converter's Qwen3-Next / Qwen3.5-MoE GGUF (gguf_pairs.gguf_pair,
    shared with test_gguf_qwen3_next.py): the GGF and static checks and every engine check run through the
    DeltaNet layers and the experts read from the GGUF, no warning or error. ~5-15 s each on a loaded 2-core
    machine, ~15-20 s more for the conversion when this runs before test_gguf_qwen3_next.py."""
    from tests.assets import or_fail
    from tests.reference_engine.core.gguf_pairs import gguf_pair
    _, path = or_fail(gguf_pair, arch)         # an asset that cannot be fetched fails the test: never a skip
    report = run_checks(path, select=["GGF", *FAMILY_RUN], quick=True, device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "too small"
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"GGF001", "GGF003", "GGF010", "GGF030", "CFG050", "CFG051", "CFG052", "CFG053", "WGT001", "MOE001",
            "GLD002", "ACT001", "ENG001", "ENG002"} <= ran
