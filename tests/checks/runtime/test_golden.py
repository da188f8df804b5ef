"""Golden three-step method: each step fires on its own fault, names where the core breaks, and later steps
report "not run: step N failed" instead of piling up noise."""
from __future__ import annotations

import shutil

import pytest
import torch

from checks.runtime import golden
from checks.shared.probe_runs import ForwardRun, StatsRecorder
from checks.shared.prompts import probe_inputs
from checks.catalogue.inputs import CheckInputs
from llmdoctor.run.runner import run_checks
from tests.checks.zoo import edit_json, one_value
from tests.checks.zoo_engine import TEMPLATE_PADS_BEFORE_ROLES


def statuses(report) -> dict[str, str]:
    return {c.id: c.status for c in report.checks}


@pytest.fixture
def llama(factory_model_dir):
    return factory_model_dir("llama")


def test_healthy_model_passes_all_three_steps(llama):
    report = run_checks(llama, select=["GLD"], quick=True)
    assert statuses(report) == {"GLD001": "passed", "GLD002": "passed", "GLD003": "passed"}
    assert report.findings == []


@pytest.mark.parametrize("tensor, module, submodule", [
    ("model.layers.0.self_attn.o_proj.weight", "attn", "attention"),
    ("model.layers.1.mlp.up_proj.weight", "mlp", "mlp"),
    ("model.layers.1.post_attention_layernorm.weight", "post_norm", "norm"),
])
def test_nan_is_bisected_to_layer_and_submodule_and_step_3_not_run(llama, tmp_path, tensor, module, submodule):
    broken = shutil.copytree(llama, tmp_path / "m")
    one_value(tensor, float("nan"))(broken)
    report = run_checks(broken, select=["GLD"], quick=True)
    gld2 = report.findings_for("GLD002")
    layer = int(tensor.split(".")[2])
    assert gld2 and all(f.evidence["first_bad"]["layer"] == layer for f in gld2)
    assert {(f.evidence["first_bad"]["module"], f.evidence["first_bad"]["submodule"]) for f in gld2} == {
        (module, submodule)}
    assert f"layer {layer} {submodule}" in gld2[0].message
    assert "'!!!!'" in gld2[0].message            # all-NaN logits: argmax is id 0
    run = next(c for c in report.checks if c.id == "GLD003")
    assert (run.status, run.reason) == ("skipped", "not run: step 2 failed")


def test_step_1_failure_stops_steps_2_and_3(llama, tmp_path):
    broken = shutil.copytree(llama, tmp_path / "m")
    edit_json("tokenizer_config.json", chat_template=TEMPLATE_PADS_BEFORE_ROLES)(broken)
    report = run_checks(broken, select=["GLD"], quick=True)
    assert statuses(report)["GLD001"] == "failed"
    finding = report.findings_for("GLD001")[0]
    assert "pad token" in finding.message and "<|im_start|>" in finding.message
    for later in ("GLD002", "GLD003"):
        run = next(c for c in report.checks if c.id == later)
        assert (run.status, run.reason) == ("skipped", "not run: step 1 failed")


def test_explosion_without_nan_is_localized(llama):
    """A capture hook that blows one point up (no NaN) is found as 'out of range' exactly there."""
    ctx = CheckInputs(llama, quick=True)
    recorder = StatsRecorder()

    def blow_up_then_record(layer, module, x):
        if (layer, module) == (1, "post_norm"):
            x = x * 1e6
        recorder(layer, module, x)
        return x
    ctx.engine.logits(list(probe_inputs(ctx)[0].ids), capture=blow_up_then_record)
    spot = golden.localize(ForwardRun(probe_inputs(ctx)[0], torch.zeros(1), recorder), 65504.0)
    assert (spot["layer"], spot["module"], spot["submodule"], spot["nonfinite"]) == (1, "post_norm", "norm", 0)


def test_nan_decode_step_shows_the_bang_signature(llama, monkeypatch):
    """Prefill fine, a later decode step all NaN (fp16 overflow mid-generation): step 3 names the signature."""
    ctx = CheckInputs(llama, quick=True)
    engine = ctx.engine
    monkeypatch.setattr(engine, "decode", lambda seqs, ids, **kw: torch.full((len(seqs), engine.config.vocab_size),
                                                                             float("nan")))
    findings = list(golden.golden_closed_loop(ctx))
    assert findings and all("id 0" in f.message and "!!!!" in f.message for f in findings)
    assert findings[0].evidence["greedy_ids"][-1] == 0
