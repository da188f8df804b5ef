"""OLMo 2 and OLMo 3 against transformers: post-norm layers (no norm before a branch, one after each), q/k
RMS-normed over the whole projections; OLMo 3's sliding windows (20 tokens here, sequences of 256) and its
per-layer-kind RoPE (YaRN on the full layers only, past original_max_position_embeddings 64)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN
from reference_engine.core import CoreEngine
from tests.reference_engine.core.tiny_models import random_ids
from tests.reference_engine.core.transformers_parity import (TOL, bite, check_against_transformers,
                                                        check_batch_equals_alone, core)

VARIANTS = ["olmo2_post_norm", "olmo3_windows_yarn"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_and_greedy_match_transformers(variant):
    check_against_transformers(variant)


def test_ragged_batch_and_chunked_prefill_match_each_sequence_alone():
    check_batch_equals_alone("olmo3_windows_yarn")


def test_the_features_matter():
    """Full-projection q/k norms as per-head ones would be another model; OLMo 3's sliding layers use their own
    (unscaled) RoPE table and really have windows shorter than the sequence."""
    assert bite("olmo2_post_norm", attention={"qk_norm": None}) > 1e-2
    eng, ids = core("olmo3_windows_yarn"), random_ids(100, seed=3)
    assert eng.windows == [20, 20, 20, None] and eng.rope.local is not None
    base = eng.logits(ids)
    eng.rope = replace(eng.rope, local=None)                    # YaRN rows on the sliding layers too
    assert (eng.logits(ids) - base).abs().max().item() > 1e-2


@pytest.mark.parametrize("preset", ["olmo2", "olmo3"])
def test_healthy_model_passes_the_static_and_engine_checks(factory_model_dir, preset):
    report = run_checks(factory_model_dir(preset), select=FAMILY_RUN, quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "untrained"      # a tiny factory model: measured, not judged
    assert {"WGT001", "WGT003", "GLD002", "ACT001", "ENG001"} <= {r.id for r in report.checks if r.status == "passed"}


def test_olmo3_flat_rope_scaling_applies_to_the_full_layers_only(tmp_path):
    """A pre-transformers-5 OLMo 3 config (flat rope_theta + rope_scaling, as released checkpoints write it):
    YaRN on the full layers, plain RoPE on the sliding ones, as transformers reads it."""
    import json
    import shutil

    from tests.hf_models import hf_logits
    from tests.reference_engine.core.tiny_models import load_hf, model_dir
    d = tmp_path / "flat"
    shutil.copytree(model_dir("olmo3_flat_yarn"), d)
    config = json.loads((d / "config.json").read_text())
    full = config.pop("rope_parameters")["full_attention"]
    config["rope_theta"], config["rope_scaling"] = full.pop("rope_theta"), full
    (d / "config.json").write_text(json.dumps(config))
    eng, ids = CoreEngine.from_pretrained(d), random_ids(200, seed=1)
    assert eng.config.family.settings.positions.local_rope_plain and eng.rope.local.rope_type == "default"
    assert (eng.logits(ids) - hf_logits(load_hf(d), ids)).abs().max().item() <= TOL
