"""--memory-budget, the plan in the report, streaming check runs equal to resident ones, and torchrun
pipelines of 2 and 3 processes reporting what one process reports."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import llmdoctor
from llmdoctor.cli import cli

ENGINE = "golden,activations,numerics,generation"   # the engine checks that read the weights most
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def model(factory_model_dir):
    return factory_model_dir("llama")


def invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, env=env)


def comparable(report: dict) -> list:
    return [(f["check"], f["severity"], f["message"], f["evidence"]) for f in report["findings"]]


def test_budget_below_one_layer_exits_2_with_one_line(model):
    result = invoke("check", model, "--memory-budget", "1MiB", "--select", ENGINE)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs at least" in lines[0] and "memory budget is 1 MiB" in lines[0]


@pytest.mark.parametrize("bad", ["lots", "-3G", "12 parsecs"])
def test_malformed_budget_is_an_input_error(model, bad):
    result = invoke("check", model, "--memory-budget", bad)
    assert result.exit_code == 2 and "--memory-budget" in result.stderr


def test_plan_is_printed_and_reported(model):
    result = invoke("check", model, "--select", "golden", "--format", "json", "--memory-budget", "64GiB")
    report = json.loads(result.stdout)
    assert report["plan"]["mode"] == "resident" and report["plan"]["budget_bytes"] == 64 << 30
    assert report["plan"]["budget_source"] == "--memory-budget"
    assert "plan:" not in result.stderr          # a resident plan on a pipe lives in the report only


def test_a_streaming_plan_is_printed(model):
    os.environ["LLMDOCTOR_STREAMING"] = "1"
    try:
        result = invoke("check", model, "--select", "golden", "--format", "json", "--memory-budget", "64GiB")
    finally:
        del os.environ["LLMDOCTOR_STREAMING"]
    assert "plan: streaming" in result.stderr and json.loads(result.stdout)["plan"]["mode"] == "streaming"


def test_no_plan_without_engine_checks(model):
    report = json.loads(invoke("check", model, "--select", "config", "--format", "json").stdout)
    assert report["plan"] is None


def test_streaming_run_reports_what_the_resident_run_reports(model):
    resident = llmdoctor.check(model, select=ENGINE.split(","), use_config=False, memory_budget="64GiB")
    os.environ["LLMDOCTOR_STREAMING"] = "1"
    try:
        streaming = llmdoctor.check(model, select=ENGINE.split(","), use_config=False, memory_budget="64GiB")
    finally:
        del os.environ["LLMDOCTOR_STREAMING"]
    assert streaming.plan["mode"] == "streaming" and resident.plan["mode"] == "resident"
    assert streaming.plan["actual"]["passes"] > 0 and streaming.plan["actual"]["bytes_read"] > 0
    assert [(f.check, f.severity, f.message, f.evidence) for f in streaming.findings] == \
           [(f.check, f.severity, f.message, f.evidence) for f in resident.findings]
    # every check runs on both paths with the same outcome (CNV001's shifted-norm probes included: a lane
    # on adjusted copies of each layer, sweep.NormShift)
    assert [(c.id, c.status) for c in streaming.checks] == [(c.id, c.status) for c in resident.checks]


def test_config_file_budget(model, tmp_path):
    (tmp_path / "llmdoctor.toml").write_text('memory-budget = "1MiB"\n')
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = invoke("check", model, "--select", "golden")
        assert result.exit_code == 2 and "needs at least" in result.stderr
        (tmp_path / "llmdoctor.toml").write_text('memory-budget = "a lot"\n')
        result = invoke("check", model, "--select", "golden")
        assert result.exit_code == 2 and "memory-budget" in result.stderr
    finally:
        os.chdir(cwd)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("procs", [2, 3])
def test_torchrun_pipeline_reports_what_one_process_reports(model, procs, tmp_path):
    args = ["check", str(model), "--select", "golden,activations,numerics", "--format", "json", "--no-config"]
    env = {**os.environ, "LLMDOCTOR_DIST_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "llmdoctor", *args], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=600)
    many = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs),
                           "--master-port", str(_port()), "-m", "llmdoctor", *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert many.returncode == one.returncode, many.stderr[-2000:]
    single, piped = json.loads(one.stdout), json.loads(many.stdout)   # rank 0 alone printed a report
    assert piped["plan"]["ranks"] == procs and piped["plan"]["mode"] == "streaming"
    assert comparable(piped) == comparable(single)


@pytest.mark.parametrize("command", [["generate", "{model}", "Hello"], ["baseline", "{model}", "-o", "{out}"]])
def test_generate_and_baseline_use_the_planner(model, tmp_path, command):
    args = [a.format(model=model, out=tmp_path / "golden.json") for a in command]
    refused = invoke(*args, "--memory-budget", "1MiB")
    assert refused.exit_code == 2 and "needs at least" in refused.stderr
    assert not (tmp_path / "golden.json").exists()
    ok = invoke(*args, "--memory-budget", "64GiB", *(["--max-new-tokens", "4"] if command[0] == "generate" else []))
    assert ok.exit_code == 0 and "plan:" not in ok.stderr      # resident, on a pipe: not announced


def test_progress_shows_layers_and_bytes_on_a_tty_only():
    import io
    from llmdoctor.run.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress(3, stream=stream)
        bar.start("GLD002 logits")
        bar.layer(12, 32, 3_400_000_000)
        bar.close()
    assert "layer 12/32, 3.4 GB read" in tty.getvalue() and "GLD002" in tty.getvalue()
    assert pipe.getvalue() == ""
