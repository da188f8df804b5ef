"""Drift against a golden baseline: the KL estimate, divergence positions, tokenizer drift, and what happens
without a baseline or with an unusable one."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from checks.runtime import drift
from checks.shared.baseline_file import top_k_rows
from llmdoctor.run.baseline_recording import record, save
from llmdoctor.run.runner import run_checks
from tests.checks.zoo import edit_tokenizer


def test_kl_top_k_is_zero_on_itself_and_exact_when_k_covers_the_vocab():
    g = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(1, 6, generator=g), torch.randn(1, 6, generator=g)
    row = top_k_rows(p_logits, 6)[0]
    q = torch.log_softmax(q_logits[0].double(), -1)
    p = torch.log_softmax(p_logits[0].double(), -1)
    assert drift.kl_top_k(row, p) == pytest.approx(0.0, abs=1e-9)
    exact = float((p.exp() * (p - q)).sum())
    assert drift.kl_top_k(row, q) == pytest.approx(exact, rel=1e-5)
    partial = top_k_rows(p_logits, 2)[0]                  # the rest bucket: a lower bound of the full KL
    assert 0 <= drift.kl_top_k(partial, q) <= exact + 1e-9


def test_first_divergence():
    assert drift.first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert drift.first_divergence([1, 2], [1, 2, 3]) is None


@pytest.fixture(scope="module")
def golden(factory_model_dir, tmp_path_factory):
    model = factory_model_dir("llama")
    return model, save(record(model, quick=True), tmp_path_factory.mktemp("golden") / "golden.json", model)


def test_no_baseline_skips(golden):
    report = run_checks(golden[0], select=["DRF"], quick=True)
    assert {(c.status, c.reason) for c in report.checks} == {("skipped", "no --baseline given")}


def test_tokenizer_change_is_token_drift(golden, tmp_path):
    model, baseline = golden
    changed = shutil.copytree(model, tmp_path / "m")
    edit_tokenizer(lambda tok: tok.update(normalizer={"type": "Lowercase"}))(changed)
    report = run_checks(changed, select=["DRF002"], quick=True, baseline=baseline)
    problems = report.findings_for("DRF002")
    assert problems and "token ids differ" in problems[0].message
    assert problems[0].evidence["baseline_ids"] != problems[0].evidence["ids_now"]


def test_unusable_baseline_is_an_error_not_a_pass(golden, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "llmdoctor-baseline", "schema_version": 99, "probes": []}))
    report = run_checks(golden[0], select=["DRF"], quick=True, baseline=bad)
    (error,) = report.findings_for("DRF001")
    assert error.severity.value == "error" and "schema_version 99" in error.message
    (unrun,) = report.findings_for("DRF003")      # --baseline was given: its skip is an error (run/honoured.py)
    assert unrun.severity.value == "error" and "--baseline" in unrun.message and "did not run" in unrun.message


def test_summary_plot_has_one_series_per_probe(golden):
    model, baseline = golden
    report = run_checks(model, select=["DRF003"], quick=True, baseline=baseline)
    (info,) = report.findings
    plot = info.data["plot"]
    assert len(plot["series"]) == len(json.loads(baseline.read_text())["probes"])
    assert all(len(v) == len(plot["x"]) for v in plot["series"].values())
    assert all(p["max_kl"] < 1e-9 or not math.isfinite(p["max_kl"]) for p in info.evidence["probes"])
