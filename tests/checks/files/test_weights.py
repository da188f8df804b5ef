"""Weight checks: harmless leftovers are info, thresholds move the outlier limit, and the scan reads each
tensor once per run (shared by WGT005-WGT008 and EMB001-EMB004)."""
from __future__ import annotations

import torch

from checks.catalogue.inputs import CheckInputs
from checks.files.weights import all_zero_tensors, nonfinite_weights
from llmdoctor.run.runner import run_checks
from tests.checks import zoo


def test_rotary_inv_freq_leftover_is_info(broken_copy):
    def add_inv_freq(t, d):
        t["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    d = broken_copy("llama", zoo.edit_tensors(add_inv_freq))
    report = run_checks(d, select=["WGT002"])
    assert [f.severity.value for f in report.findings] == ["info"]


def test_outlier_ratio_threshold(broken_copy):
    d = broken_copy("deep", zoo.scale_tensor("model.layers.2.mlp.up_proj.weight", 1000.0))
    assert [f.check for f in run_checks(d, select=["WGT007"]).findings] == ["WGT007"]
    quiet = run_checks(d, select=["WGT007"], thresholds={"WGT007": {"rms_ratio": 5000.0}})
    assert quiet.findings == []


def test_scan_is_shared_between_checks(broken_copy):
    ctx = CheckInputs(broken_copy("llama", zoo.one_value("model.norm.weight", float("nan"))))
    assert len(list(nonfinite_weights(ctx))) == 1
    scan = ctx.state["weight_scan"]
    list(all_zero_tensors(ctx))
    assert ctx.state["weight_scan"] is scan
