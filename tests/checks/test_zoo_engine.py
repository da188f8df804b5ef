"""The engine fault zoo: every fault fires its expected engine check at its expected severity (with the
evidence it must name), no engine check crashes, and healthy models — every factory preset and SmolLM2 —
get no warning or error from the engine checks."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import checks
from llmdoctor.run.baseline_recording import record, save
from llmdoctor.cli import DEMO_MODEL
from llmdoctor.run.runner import run_checks
from tests.checks.conftest import fired, no_crashes, problems
from tests.checks.zoo_engine import ENGINE_BASES, ENGINE_CATEGORIES, ENGINE_FAULTS

PRESETS = ("llama", "mistral", "qwen2", "qwen3")
ENGINE_FAMILIES = ("GLD", "ACT", "KVC", "NUM", "GEN", "DRF", "ENG")
# ids whose firing is tested outside the zoo (constructed cases / monkeypatched engine faults); no model file
# can make the reference engine's self-tests (ENG) fail, so tests/checks/engine/test_selftest.py sabotages the engine
COVERED_ELSEWHERE = {"GLD003", "ACT001", "ACT002", "NUM002", "NUM003", "GEN002", "GEN003", "GEN004", "DRF002",
                     "DRF003", "ENG001", "ENG002", "ENG003", "ENG004",
                     # the hybrid self-tests: tests/checks/engine/test_hybrid_selftest.py plants each bug in a mixer
                     "ENG010", "ENG011", "ENG012", "ENG013"}


def contains(evidence: dict, expected: dict) -> bool:
    for key, value in expected.items():
        if isinstance(value, dict):
            if not isinstance(evidence.get(key), dict) or not contains(evidence[key], value):
                return False
        elif evidence.get(key) != value:
            return False
    return True


@pytest.fixture(scope="module")
def engine_base(factory_model_dir):
    def get(name: str) -> Path:
        preset, overrides = ENGINE_BASES[name]
        return DEMO_MODEL if preset is None else factory_model_dir(preset, **overrides)
    return get


@pytest.mark.parametrize("fault", ENGINE_FAULTS, ids=[f.name for f in ENGINE_FAULTS])
def test_engine_fault_fires_expected_check(fault, engine_base, tmp_path, confusion):
    base = engine_base(fault.base)
    broken = shutil.copytree(base, tmp_path / "model")
    fault.apply(broken)
    baseline = None
    if fault.baseline:
        baseline = save(record(base, quick=True), tmp_path / "golden.json", base)
    report = run_checks(broken, select=[fault.check[:3]] if fault.baseline else [fault.check], quick=True,
                        baseline=baseline)
    confusion(f"engine:{fault.name}", fault.check, fired(report))
    no_crashes(report)
    assert f"{fault.check}:{fault.severity}" in fired(report), (fault.name, fired(report))
    if fault.evidence:
        findings = report.findings_for(fault.check)
        assert any(contains(f.evidence, fault.evidence) for f in findings), [f.evidence for f in findings]


def test_baseline_passes_identical_copy(engine_base, tmp_path):
    base = engine_base("llama")
    copy = shutil.copytree(base, tmp_path / "model")
    baseline = save(record(base, quick=True), tmp_path / "golden.json", base)
    report = run_checks(copy, select=["DRF"], quick=True, baseline=baseline)
    no_crashes(report)
    assert problems(report) == []
    assert {r.id: r.status for r in report.checks} == {"DRF001": "passed", "DRF002": "passed", "DRF003": "passed"}


def test_zoo_covers_every_engine_check():
    engine = {s.id for s in checks.load_all() if s.id[:3] in ENGINE_FAMILIES}
    assert engine - {f.check for f in ENGINE_FAULTS} - COVERED_ELSEWHERE == set()
    assert COVERED_ELSEWHERE <= engine


@pytest.mark.parametrize("preset", PRESETS)
def test_healthy_factory_model_is_clean(preset, factory_model_dir):
    report = run_checks(factory_model_dir(preset), select=ENGINE_CATEGORIES, quick=True)
    no_crashes(report)
    assert problems(report) == []
    assert {r.status for r in report.checks} <= {"passed", "skipped"}
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"GLD001", "GLD002", "GLD003", "ENG001", "ENG002", "ENG003", "ENG004", "KVC003", "NUM001",
            "ACT001"} <= ran


def test_healthy_rope_scaled_model_is_clean(engine_base):
    report = run_checks(engine_base("rope_scaled"), select=["kv_cache", "config"], quick=True)
    no_crashes(report)
    assert problems(report) == []


@pytest.mark.assets
def test_smollm2_engine_checks_are_clean(smollm2_dir):
    report = run_checks(smollm2_dir, select=ENGINE_CATEGORIES, quick=True)
    no_crashes(report)
    assert problems(report) == []


def test_demo_model_is_clean_in_thorough_mode():
    """The demo is trained on Botchan's text and on ChatML exchanges of its sentences (scripts/train_demo_model.py):
    its chat answer ends with <|im_end|>, its EOS id. Nothing warns, nothing errs (the README's first command)."""
    report = run_checks(DEMO_MODEL, select=ENGINE_CATEGORIES)
    no_crashes(report)
    assert problems(report) == []
    assert report.exit_code("error") == 0 and {r.status for r in report.checks if r.id == "GEN004"} == {"passed"}


def test_demo_whose_end_of_turn_is_no_eos_id_never_ends_its_chat(tmp_path):
    """The fault GEN004 names: the template ends turns with <|im_end|> but the EOS ids say <|end_of_text|> (a
    chat model shipped with its base model's generation_config.json): the answer runs to max_new_tokens."""
    import json

    broken = shutil.copytree(DEMO_MODEL, tmp_path / "model")
    added = {t["content"]: t["id"] for t in json.loads((broken / "tokenizer.json").read_text())["added_tokens"]}
    for name in ("config.json", "generation_config.json"):
        path = broken / name
        path.write_text(json.dumps({**json.loads(path.read_text()), "eos_token_id": added["<|end_of_text|>"]}))
    report = run_checks(broken, select=["GEN004"])
    no_crashes(report)
    (finding,) = report.findings_for("GEN004")
    assert finding.severity.value == "warning" and "hits max_new_tokens" in finding.message
    assert finding.evidence["weights_at_initialisation"] is False


def test_broken_trained_weights_keep_their_severity_though_the_loss_looks_untrained(engine_base, tmp_path):
    """The old rule (probe NLL >= 0.8 ln(vocab) -> "looks untrained" -> info) would have downgraded this fault:
    its loss is far past uniform. The verdict now comes from the weights, which are trained."""
    import math

    import torch

    from checks.shared.probe_runs import forward_runs
    from checks.catalogue.inputs import CheckInputs
    from tests.checks.zoo_engine import eos_row_flipped
    broken = shutil.copytree(engine_base("demo"), tmp_path / "model")
    eos_row_flipped(broken)
    ctx = CheckInputs(broken, quick=True)
    nll = [float(-torch.log_softmax(r.logits[:-1].double(), -1).gather(1, torch.tensor(r.probe.ids[1:])[:, None])
                 .mean()) for r in forward_runs(ctx) if len(r.probe.ids) > 1]
    assert min(nll) > math.log(ctx.engine.config.vocab_size)
    report = run_checks(broken, select=["GEN001"], quick=True)
    (finding,) = report.findings
    assert finding.severity.value == "warning" and "initialisation" not in finding.message


def test_norm_convention_fault_is_caught_when_streaming(engine_base, tmp_path, monkeypatch):
    """CNV001's shifted-norm probes run as lanes on adjusted copies of each streamed layer: the same finding
    as the resident engine's, in one pass over the weights."""
    fault = next(f for f in ENGINE_FAULTS if f.check == "CNV001")
    broken = shutil.copytree(engine_base(fault.base), tmp_path / "model")
    fault.apply(broken)
    resident = run_checks(broken, select=["CNV001"], quick=True)
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    streamed = run_checks(broken, select=["CNV001"], quick=True)
    assert streamed.plan["mode"] == "streaming" and streamed.plan["actual"]["passes"] == 1
    assert [(f.check, f.severity, f.message) for f in streamed.findings] == \
           [(f.check, f.severity, f.message) for f in resident.findings]
    assert "CNV001:error" in fired(streamed)
