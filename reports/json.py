"""JSON report: a stable schema (docs/report-schema.md, reports/report.schema.json), sorted keys."""
from __future__ import annotations

import json
from typing import TextIO

from findings import Report

from reports.common import severity_counts, status_counts

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
        "findings": [f.as_dict() for f in report.findings],
    }


def render(report: Report, stream: TextIO) -> None:
    json.dump(as_dict(report), stream, sort_keys=True, indent=2, allow_nan=False)
    stream.write("\n")
