"""Activation statistics: the table agrees with a direct computation, pooling over probes is exact, std jumps
fire and stay silent as they should, and non-finite layers are named (the mask-covers-padding self-test, once
ACT004, is ENG003 in tests/checks/engine/test_selftest.py)."""
from __future__ import annotations

import io
import shutil

import pytest
import torch

from checks.runtime import activations
from checks.shared.probe_runs import point_stats
from checks.catalogue.inputs import CheckInputs
from llmdoctor.run.runner import run_checks
from reports import render
from reference_engine.core.capture import MODULES, ActivationRecorder
from tests.checks.zoo import one_value


@pytest.fixture
def llama(factory_model_dir):
    return factory_model_dir("llama")


def test_pooled_stats_equal_stats_of_the_concatenation():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 8, generator=g) * 2 + 1, torch.randn(5, 8, generator=g) - 3
    row = activations.pooled([point_stats(0, "hidden", a), point_stats(0, "hidden", b)])
    both = torch.cat([a.flatten(), b.flatten()])
    assert row["mean"] == pytest.approx(float(both.mean()), rel=1e-5)
    assert row["std"] == pytest.approx(float(both.std(unbiased=False)), rel=1e-5)
    assert (row["min"], row["max"]) == pytest.approx((float(both.min()), float(both.max())))
    assert row["absmax"] == pytest.approx(float(both.abs().max()))


def test_point_stats_skip_nonfinite_values_and_count_them():
    x = torch.tensor([[1.0, float("nan")], [float("inf"), -3.0]])
    s = point_stats(2, "mlp", x)
    assert (s.nonfinite, s.min, s.max, s.absmax, s.numel) == (2, -3.0, 1.0, 3.0, 2)


def test_table_matches_a_direct_capture(llama):
    ctx = CheckInputs(llama, quick=True)
    table = activations.activation_table(activations.forward_runs(ctx))
    layers = ctx.engine.config.num_hidden_layers
    assert [(r["layer"], r["module"]) for r in table] == [(-1, "embed")] + [
        (i, m) for i in range(layers) for m in ("hidden", "attn", "mlp")]
    kept = ActivationRecorder(keep=True)     # the engine's own recorder keeps the raw tensors
    probe = activations.forward_runs(ctx)[0].probe
    ctx.engine.logits(list(probe.ids), capture=kept)
    single = activations.activation_table(activations.forward_runs(ctx)[:1])
    row = next(r for r in single if (r["layer"], r["module"]) == (1, "mlp"))
    assert row["std"] == pytest.approx(float(kept.tensors[(1, "mlp")].std(unbiased=False)), rel=1e-4)
    assert set(MODULES) >= {"hidden", "attn", "mlp"}


def test_std_jumps_fire_on_orders_of_magnitude_only():
    smooth = [(-1, 0.1), (0, 2.0), (1, 13.0), (2, 423.0), (3, 95.0)]      # SmolLM2-like: at most ~75x
    assert activations.std_jumps(smooth, 1000.0) == []
    jumpy = [(-1, 0.02), (0, 0.03), (1, 9e3), (2, 9e3)]
    assert [(j["from_layer"], j["to_layer"]) for j in activations.std_jumps(jumpy, 1000.0)] == [(0, 1)]
    collapse = [(0, 50.0), (1, 0.001)]
    assert activations.std_jumps(collapse, 1000.0)[0]["ratio"] < 1


def test_info_table_and_plot_on_a_healthy_model(llama):
    report = run_checks(llama, select=["ACT"], quick=True)
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(("ACT001", "ACT002", "ACT003"), "passed")
    (info,) = report.findings
    assert info.severity.value == "info" and info.evidence["table"]
    assert 0 < info.evidence["mask_valid_ratio"]["overall"] < 1
    plot = info.data["plot"]
    assert plot["y_scale"] == "log" and all(len(v) == len(plot["x"]) for v in plot["series"].values())
    html = io.StringIO()
    render(report, "html", html)
    assert "<svg" in html.getvalue() and "plot not drawn" not in html.getvalue()


def test_nan_weight_names_first_nonfinite_layer(llama, tmp_path):
    broken = shutil.copytree(llama, tmp_path / "m")
    one_value("model.layers.1.self_attn.o_proj.weight", float("nan"))(broken)
    report = run_checks(broken, select=["ACT002"], quick=True)
    assert report.findings and all((f.evidence["layer"], f.evidence["module"]) == (1, "attn")
                                   for f in report.findings_for("ACT002"))
