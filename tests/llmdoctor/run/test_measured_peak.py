"""The report's plan records the peak the run measured (VmHWM), and it stays within the prediction on a resident
and a streamed run. Each run is its own process: the peak of a test process would count pytest and the oracles."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference_engine.budget.plan import MiB
from tests.llmdoctor.run.test_memory_budget import ROOT

# what the plan does not model: allocator slack, library caches (jinja2, regex) and the largest transient of a
# check; the plan's base term (240 MiB: python and torch) is most of a tiny model's prediction
MARGIN = 64 * MiB


@pytest.mark.parametrize("streaming", ["0", "1"])
def test_measured_peak_is_recorded_and_within_the_prediction(factory_model_dir, tmp_path, streaming):
    model, out = factory_model_dir("llama"), tmp_path / "report.json"
    run = subprocess.run([sys.executable, "-m", "llmdoctor", "check", str(model), "--quick", "--no-config",
                          "--format", "json", "-o", str(out)], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "LLMDOCTOR_STREAMING": streaming}, timeout=600)
    assert run.returncode in (0, 1), run.stderr[-2000:]
    plan = json.loads(out.read_text())["plan"]
    assert plan["mode"] == ("streaming" if streaming == "1" else "resident")
    actual = plan["actual"]
    assert actual["peak_source"] == "VmHWM" and actual["peak_bytes"] > 100 * MiB
    assert actual["peak_bytes"] <= plan["predicted_peak_bytes"] + MARGIN, (
        f"measured {actual['peak_bytes'] / MiB:.0f} MiB, predicted {plan['predicted_peak_bytes'] / MiB:.0f} MiB")


def test_a_planner_failure_is_stated_and_forced_streaming_refuses(factory_model_dir, tmp_path, monkeypatch):
    """A model the planner cannot read is built resident without a budget only with a warning and the reason in
    the report; a run that must stream refuses it (exit 2, one line)."""
    import llmdoctor
    from reference_engine import engine_builder

    def broken(spec):
        raise ValueError("no sizes for this format")
    monkeypatch.setattr(engine_builder, "make_engine_plan", broken)
    model = factory_model_dir("llama")
    report = llmdoctor.check(model, select=["GLD002"], use_config=False)
    assert report.plan["planned"] is False and "no sizes for this format" in report.plan["fallback"]
    assert report.plan["actual"]["peak_bytes"] > 0
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    from click.testing import CliRunner

    from llmdoctor.cli import cli
    result = CliRunner().invoke(cli, ["check", str(model), "--select", "GLD002", "--no-config"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot plan the memory of a streamed run" in lines[0]


def test_forced_streaming_below_its_peak_exits_2(factory_model_dir, monkeypatch):
    from click.testing import CliRunner

    from llmdoctor.cli import cli
    from llmdoctor.run.workloads import CHECK_QUICK
    from reference_engine.budget.plan import GiB, make_plan
    model = factory_model_dir("llama")
    need = make_plan(model, 64 * GiB, workload=CHECK_QUICK, force="streaming").streaming_peak_bytes
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    result = CliRunner().invoke(cli, ["check", str(model), "--quick", "--select", "GLD002", "--no-config",
                                      "--memory-budget", str(need - 4 * MiB)])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "streaming forced" in lines[0]


@pytest.mark.assets
def test_each_run_reports_its_own_peak(smollm2_dir, factory_model_dir):
    """Two runs in one process (a notebook, a service): the small run after a big one reports its own peak, not
    the process's high-water mark the big one left (start_peak resets VmHWM at each run's start)."""
    import llmdoctor
    big = llmdoctor.check(smollm2_dir, select=["GLD002"], use_config=False).plan["actual"]
    small = llmdoctor.check(factory_model_dir("llama"), select=["GLD002"], use_config=False).plan["actual"]
    assert big["peak_source"] == small["peak_source"] == "VmHWM"
    weights = (Path(smollm2_dir) / "model.safetensors").stat().st_size        # float32: 540 MB held by the big run
    assert small["peak_bytes"] < big["peak_bytes"] - weights // 2, (
        f"big run {big['peak_bytes'] / MiB:.0f} MiB, small run {small['peak_bytes'] / MiB:.0f} MiB")
