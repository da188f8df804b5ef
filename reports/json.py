"""JSON report: a stable schema (docs/report-schema.md, reports/report.schema.json), sorted keys."""
from __future__ import annotations

import json
from typing import TextIO

from findings import CheckRun, Finding, Location, Report

from reports.summary import severity_counts, status_counts

SCHEMA_VERSION = 1


def as_dict(report: Report) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "llmdoctor",
        "tool_version": report.tool_version,
        "model": report.model,
        "fingerprint": report.fingerprint,
        "generated_at": report.generated_at,
        "duration_s": round(report.duration_s, 6),
        "device": report.device,
        "dtype": report.dtype,
        "fail_on": report.fail_on,
        "exit_code": report.exit_code(),
        "resources": {name: round(seconds, 6) for name, seconds in report.resources.items()},
        "plan": report.plan,
        "load": report.load,
        "summary": {"checks": len(report.checks), **status_counts(report), **severity_counts(report)},
        "checks": [run.as_dict() for run in report.checks],
        "findings": [finding_dict(f) for f in report.findings],
        "known_report": report.known_report,
    }


def finding_dict(finding: Finding) -> dict:
    """A finding with where it is and its identity across runs (what `--known` matches on)."""
    location = finding.location.as_dict() if finding.location else {"file": None, "line": None, "logical": None}
    return {**finding.as_dict(), "location": location, "fingerprint": finding.fingerprint, "known": finding.known}


def render(report: Report, stream: TextIO) -> None:
    json.dump(as_dict(report), stream, sort_keys=True, indent=2, allow_nan=False)
    stream.write("\n")


def from_dict(data: dict) -> Report:
    """A report read back from its JSON (to render it in another format, e.g. SARIF after the run)."""
    findings = [Finding(check=f["check"], category=f["category"], severity=f["severity"], message=f["message"],
                        evidence=f.get("evidence") or {}, hint=f.get("hint", ""), data=f.get("data"),
                        location=Location(**f["location"]) if f.get("location") else None,
                        fingerprint=f.get("fingerprint"), known=bool(f.get("known", False)))
                for f in data["findings"]]
    checks = [CheckRun(c["id"], c["category"], c["status"], c["duration_s"], c.get("summary", ""), c.get("reason", ""))
              for c in data["checks"]]
    return Report(model=data["model"], fingerprint=data.get("fingerprint"), tool_version=data["tool_version"],
                  generated_at=data["generated_at"], checks=checks, findings=findings,
                  fail_on=data.get("fail_on", "error"), duration_s=data.get("duration_s", 0.0),
                  device=data.get("device", "cpu"), dtype=data.get("dtype", "float32"),
                  resources=data.get("resources") or {}, plan=data.get("plan"), known_report=data.get("known_report"),
                  load=data.get("load"))
