"""--memory-budget on a GGUF file: the planner refuses in one line, streams when the budget
forces it, and the streaming check run (one process, or a torchrun pipeline) reports what the resident run
reports."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import llmdoctor
from llmdoctor.cli import cli
from llmdoctor.run.workloads import CHECK_FULL
from reference_engine.budget.plan import GiB, make_plan
from tests.checks.zoo_gguf import Q8_0, export_spec, write_spec
from tests.llmdoctor.run.test_memory_budget import ROOT, _port, comparable
from tests.reference_engine.budget.test_plan_gguf import WIDE

ENGINE = "golden,activations,numerics,generation"   # the engine checks that read the weights most


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """The factory Llama widened until streaming is the cheaper mode, 2-D weights in Q8_0."""
    return write_spec(export_spec("llama", quant=Q8_0, **WIDE), tmp_path_factory.mktemp("budget-gguf") / "m.gguf")


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_budget_below_one_layer_exits_2_with_one_line(gguf):
    result = invoke("check", gguf, "--memory-budget", "1MiB")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs at least" in lines[0] and "memory budget is 1 MiB" in lines[0]
    assert str(gguf) in lines[0]


def test_a_budget_that_forces_streaming_gives_the_resident_findings(gguf):
    budget = make_plan(gguf, 64 * GiB, workload=CHECK_FULL).streaming_peak_bytes   # below the resident peak
    result = invoke("check", gguf, "--select", ENGINE, "--format", "json", "--no-config",
                    "--memory-budget", budget)
    assert "plan: streaming" in result.stderr
    streamed = json.loads(result.stdout)
    assert streamed["plan"]["mode"] == "streaming" and streamed["plan"]["budget_bytes"] == budget
    assert streamed["plan"]["actual"]["passes"] > 0
    assert streamed["plan"]["actual"]["bytes_read"] >= streamed["plan"]["bytes_per_pass"]
    resident = llmdoctor.check(gguf, select=ENGINE.split(","), use_config=False, memory_budget="64GiB")
    assert resident.plan["mode"] == "resident"
    assert [(f["check"], f["severity"], f["message"], f["evidence"]) for f in streamed["findings"]] == \
           [(f.check, f.severity, f.message, f.evidence) for f in resident.findings]
    ran = [(c["id"], c["status"]) for c in streamed["checks"]]
    assert ran == [(c.id, c.status) for c in resident.checks]
    assert any(status == "passed" for _, status in ran)


def test_torchrun_pipeline_streams_a_gguf_with_the_one_process_findings(gguf):
    args = ["check", str(gguf), "--select", "golden,activations,numerics", "--format", "json", "--no-config"]
    env = {**os.environ, "LLMDOCTOR_DIST_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "llmdoctor", *args], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=600)
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(_port()), "-m", "llmdoctor", *args],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert two.returncode == one.returncode, two.stderr[-2000:]
    single, piped = json.loads(one.stdout), json.loads(two.stdout)
    assert piped["plan"]["ranks"] == 2 and piped["plan"]["mode"] == "streaming"
    assert comparable(piped) == comparable(single) and comparable(single)
