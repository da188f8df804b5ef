"""DeepSeek-V2/V3 (MLA) and GLM-4.5 (factory presets): healthy models pass the static and engine checks with no
warning or error, the engine-backed and MoE checks run on them; a dead expert group (group-limited routing whose
e_score_correction_bias shuts one group out) is MOE006."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN


@pytest.mark.parametrize("preset", ["deepseek_v3", "deepseek_v2", "glm4_moe"])
def test_healthy_model_is_clean_and_the_engine_checks_run(preset, factory_model_dir):
    report = run_checks(factory_model_dir(preset), select=FAMILY_RUN, quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    assert competence_standing(report) == "untrained"      # a tiny factory model: measured, not judged
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"WGT001", "GLD002", "ACT001", "MOE001", "MOE003", "MOE004", "MOE005", "ENG001"} <= ran
    if preset != "deepseek_v2":
        assert "MOE006" in ran


def test_a_group_shut_out_by_its_bias_is_a_dead_group(factory_model_dir, tmp_path):
    """One group's e_score_correction_bias at -4 (a sign or scale slip in conversion): sigmoid scores live in
    (0, 1), so no token ever picks that group; MOE006 names it."""
    import shutil
    src = factory_model_dir("deepseek_v3")
    out = tmp_path / "dead_group"
    shutil.copytree(src, out)
    weights = load_file(out / "model.safetensors")
    name = "model.layers.1.mlp.gate.e_score_correction_bias"
    bias = weights[name].clone()
    bias[2:4] = -4.0                                               # group 1 of 4 (experts 2, 3)
    weights[name] = bias
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    report = run_checks(out, select=["MOE"], quick=True, device="cpu")
    no_crashes(report)
    found = [f for f in report.findings if f.check == "MOE006"]
    assert found and found[0].severity.value == "warning", [f.message for f in report.findings]
    assert "group 1" in found[0].message and "layer 1" in found[0].message
    assert torch.equal(torch.tensor(found[0].evidence["experts"]), torch.tensor([2, 3]))
