"""Numerics: float16 overflow is predicted from float32 magnitudes and confirmed by a float16 run, divergence
is measured per dtype, and the recommendation follows the rule documented in NUM003."""
from __future__ import annotations

import shutil

import pytest
import torch

from checks.runtime import numerics
from checks.shared.probe_runs import ForwardRun, StatsRecorder
from checks.shared.prompts import ProbeInput
from llmdoctor.run.runner import run_checks
from tests.checks.zoo import edit_json
from tests.checks.zoo_engine import scale_mlp


def run_of(logits: torch.Tensor, points=()) -> ForwardRun:
    recorder = StatsRecorder()
    for layer, module, x in points:
        recorder(layer, module, x)
    return ForwardRun(ProbeInput("p", "t", (1, 2)), logits, recorder)


def test_compare_measures_kl_and_agreement():
    g = torch.Generator().manual_seed(0)
    ref = run_of(torch.randn(2, 20, generator=g) * 3, [(0, "mlp", torch.ones(2, 4))])
    same = numerics.compare("bfloat16", [ref], [run_of(ref.logits.clone(), [(0, "mlp", torch.ones(2, 4))])])
    assert same.mean_kl == pytest.approx(0.0, abs=1e-12) and same.top1_agreement == 1.0 and same.finite
    flipped = run_of(-ref.logits, [(0, "mlp", torch.ones(2, 4))])
    far = numerics.compare("float16", [ref], [flipped])
    assert far.mean_kl > 1.0 and far.top1_agreement == 0.0
    nan = run_of(torch.full((2, 20), float("nan")), [(0, "mlp", torch.tensor([[float("inf")]]))])
    broken = numerics.compare("float16", [ref], [nan])
    assert not broken.finite and broken.first_nonfinite["module"] == "mlp" and broken.nonfinite_logits == 40


def result(dtype, kl=1e-3, top1=1.0, finite=True):
    return numerics.DtypeResult(dtype, 0 if finite else 5, None if finite else {"layer": 1, "module": "mlp"},
                                1.0, {}, 1.0, kl, kl, top1, 0.1)


def test_recommendation_rule():
    ok16, okb = result("float16"), result("bfloat16")
    assert numerics.recommend([okb, ok16], "float16", 0.1, 0.8) == "float16"       # declared and safe
    assert numerics.recommend([okb, result("float16", finite=False)], "float16", 0.1, 0.8) == "bfloat16"
    assert numerics.recommend([result("bfloat16", kl=0.5), ok16], "float32", 0.1, 0.8) == "float16"
    assert numerics.recommend([result("bfloat16", top1=0.5), result("float16", finite=False)], None, 0.1,
                              0.8) == "float32"


def test_fp16_overflow_is_an_error_when_the_model_is_declared_float16(factory_model_dir, tmp_path):
    broken = shutil.copytree(factory_model_dir("llama"), tmp_path / "m")
    scale_mlp(1, 300.0)(broken)
    edit_json("config.json", torch_dtype="float16")(broken)
    report = run_checks(broken, select=["NUM"], quick=True)
    (num1,) = [f for f in report.findings_for("NUM001") if f.severity.value != "info"]
    assert num1.severity.value == "error" and num1.evidence["float16_first_nonfinite"]["layer"] == 1
    (summary,) = report.findings_for("NUM003")
    assert summary.evidence["recommended"] == "bfloat16"
    assert [row["dtype"] for row in summary.evidence["table"]] == ["float32", "bfloat16", "float16"]


def test_divergence_threshold_is_configurable(factory_model_dir):
    model = factory_model_dir("llama")
    assert run_checks(model, select=["NUM002"], quick=True).findings == []
    strict = run_checks(model, select=["NUM002"], quick=True, thresholds={"NUM002": {"max_mean_kl": 0.0}})
    assert {f.evidence["dtype"] for f in strict.findings} == {"bfloat16", "float16"}
