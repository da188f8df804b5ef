"""Finding, Severity and Report: ordering, fail-on semantics, one-line messages, exit codes."""
from __future__ import annotations

import pytest

from findings import CheckRun, Finding, Report, Severity, fail_on_rank


def finding(severity: str, check: str = "VOC001") -> Finding:
    return Finding(check=check, category="vocab", severity=severity, message="m", evidence={}, hint="h")


def test_severity_order():
    assert Severity.ERROR.rank > Severity.WARNING.rank > Severity.INFO.rank
    assert Severity.parse("warning") is Severity.WARNING
    with pytest.raises(ValueError, match="unknown severity"):
        Severity.parse("fatal")


@pytest.mark.parametrize("severity, fail_on, fails", [
    ("error", "error", True), ("warning", "error", False), ("info", "error", False),
    ("error", "warning", True), ("warning", "warning", True), ("info", "warning", False),
    ("error", "never", False), ("warning", "never", False), ("info", "never", False),
])
def test_fail_on_matrix(severity, fail_on, fails):
    f = finding(severity)
    report = Report(model="m", fingerprint=None, tool_version="0", generated_at="t", findings=[f], fail_on=fail_on)
    assert f.fails(fail_on) is fails
    assert report.exit_code() == int(fails)


def test_finding_normalises_and_validates():
    f = Finding(check="VOC001", category="vocab", severity="error", message="two\nlines  here", evidence={"a": 1},
                hint="h")
    assert f.severity is Severity.ERROR and f.message == "two lines here"
    assert f.as_dict() == {"check": "VOC001", "category": "vocab", "severity": "error", "message": "two lines here",
                           "evidence": {"a": 1}, "hint": "h", "data": None}
    with pytest.raises(ValueError, match="unknown category"):
        Finding(check="X", category="nope", severity="error", message="m")
    with pytest.raises(ValueError, match="fail-on"):
        fail_on_rank("sometimes")


def test_report_counts_and_categories():
    runs = [CheckRun("CFG001", "config", "passed", 0.1), CheckRun("VOC001", "vocab", "failed", 0.2),
            CheckRun("FIL001", "files", "skipped", 0.0, reason="x")]
    report = Report(model="m", fingerprint=None, tool_version="0", generated_at="t", checks=runs,
                    findings=[finding("warning"), finding("info")])
    assert report.categories() == ["files", "config", "vocab"]
    assert (report.count("warning"), report.count("info"), report.count("error")) == (1, 1, 0)
    assert report.status_count("skipped") == 1
    assert report.exit_code() == 0 and report.exit_code("warning") == 1
