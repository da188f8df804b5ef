"""The shared passes (checks/shared/passes.py): a streamed check run makes only the greedy traces' passes
(a prefill and one per decode step), every other engine run the chosen checks know up front riding on them, and
its findings are those of the runs made one by one."""
from __future__ import annotations

import pytest

from llmdoctor.cli import DEMO_MODEL
from llmdoctor.run.runner import run_checks
from llmdoctor.run.workloads import CHECK_QUICK


def findings(report) -> list[tuple]:
    return [(f.check, f.severity, f.message, f.evidence) for f in report.findings]


@pytest.fixture(scope="module")
def streamed():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLMDOCTOR_STREAMING", "1")
        return run_checks(DEMO_MODEL, quick=True)


def test_quick_check_streams_in_the_passes_the_plan_counts(streamed):
    # the traces' prefill + 11 decode steps; the forward probes, shadows, CNV001, ENG001, ENG002, KVC003 ride on them
    assert streamed.plan["mode"] == "streaming"
    assert streamed.plan["actual"]["passes"] == CHECK_QUICK.passes == streamed.plan["passes"] == 12


def test_shared_pass_changes_no_finding(streamed, monkeypatch):
    """The same checks, each making its own passes: the same findings, evidence (numbers) included."""
    from checks.shared import passes as shared_pass
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    monkeypatch.setattr(shared_pass, "prepare", lambda ctx: None)
    alone = run_checks(DEMO_MODEL, quick=True)
    assert alone.plan["actual"]["passes"] == 19 > streamed.plan["actual"]["passes"]   # 19: CMP001/002's prefills
    assert findings(alone) == findings(streamed)


def test_resident_findings_are_the_streamed_ones(streamed):
    resident = run_checks(DEMO_MODEL, quick=True)
    assert resident.plan["mode"] == "resident"
    assert [(f.check, f.severity) for f in resident.findings] == [(f.check, f.severity) for f in streamed.findings]


def test_a_failed_shared_pass_is_stated_in_the_plan_and_warned(streamed, monkeypatch):
    """The shared pass made to fail mid-way: every check runs its own passes (the same findings), and the run
    says so, in the report's plan and on the plan stream, instead of costing 6 more passes silently."""
    import io

    from checks.shared import passes as shared_pass

    def broken(self, engine, step=None):
        raise RuntimeError("lane bookkeeping broke")
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    monkeypatch.setattr(shared_pass.Rides, "run", broken)
    stream = io.StringIO()
    report = run_checks(DEMO_MODEL, quick=True, plan_stream=stream)
    (entry,) = report.plan["shared_fallback"]
    assert entry["reason"] == "the shared pass failed (RuntimeError: lane bookkeeping broke)"
    assert "greedy traces" in entry["runs"] and "forward" in entry["runs"] and "GEN001" in entry["checks"]
    warnings = [line for line in stream.getvalue().splitlines() if line.startswith("warning: shared engine pass")]
    assert warnings == [shared_pass.fallback_warning(entry)] and "lane bookkeeping broke" in warnings[0]
    assert report.plan["actual"]["passes"] == 19 and findings(report) == findings(streamed)


def test_a_run_whose_inputs_cannot_be_made_is_stated(monkeypatch):
    """The shadows' inputs fail once, when the shared pass describes its runs: the NUM checks make their own
    shadow pass (and find what they found before), and the plan says why."""
    from checks.runtime import numerics
    calls, shadow_inputs = [], numerics.shadow_inputs

    def fails_once(ctx):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("no dtype to shadow")
        return shadow_inputs(ctx)
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    monkeypatch.setattr(numerics, "shadow_inputs", fails_once)
    report = run_checks(DEMO_MODEL, quick=True, select=["NUM"])
    (entry,) = report.plan["shared_fallback"]
    assert entry == {"runs": ["low-precision shadows"], "checks": entry["checks"],
                     "reason": "its inputs cannot be made (ValueError: no dtype to shadow)"}
    assert entry["checks"] and all(check.startswith("NUM") for check in entry["checks"])
    assert len(calls) > 1 and not [c for c in report.checks if c.status == "crashed"]


def test_a_healthy_streamed_run_states_no_fallback(streamed):
    assert "shared_fallback" not in streamed.plan
