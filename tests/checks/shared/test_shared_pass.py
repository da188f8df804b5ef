"""The shared passes (checks/shared/passes.py): a streamed check run makes only the greedy traces' passes
(a prefill and one per decode step), every other engine run the chosen checks know up front riding on them, and
its findings are those of the runs made one by one."""
from __future__ import annotations

import pytest

from llmdoctor.cli import DEMO_MODEL
from llmdoctor.runner import run_checks
from llmdoctor.workloads import CHECK_QUICK


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
