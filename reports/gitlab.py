"""GitLab Code Quality: a JSON array of issues (description, check_name, fingerprint, severity, location.path,
location.lines.begin), the artifact `artifacts:reports:codequality` reads. GitLab compares fingerprints between
the merge request and its target, so they must be stable across runs: they are the findings' own."""
from __future__ import annotations

import hashlib
import json
from typing import TextIO

from findings import Finding, Report

from reports.ci import GITLAB_SEVERITIES, repo_path


def issue(finding: Finding, report: Report) -> dict:
    loc = finding.location
    path = repo_path(loc.file) if loc and loc.file else report.model
    where = f" [{loc.logical}]" if loc and loc.logical else ""
    known = "[known] " if finding.known else ""
    return {"type": "issue", "description": f"{known}{finding.check}: {finding.message}{where}",
            "check_name": finding.check, "fingerprint": finding.fingerprint or _fallback(finding),
            "severity": GITLAB_SEVERITIES[finding.severity.value], "categories": [finding.category],
            "location": {"path": path, "lines": {"begin": (loc.line if loc and loc.line else 1)}}}


def _fallback(finding: Finding) -> str:
    return hashlib.sha256(f"{finding.check}\0{finding.message}".encode()).hexdigest()[:32]


def render(report: Report, stream: TextIO, rules=None) -> None:
    issues = [issue(f, report) for f in report.findings]
    # indented for people; a large report compact (json's fast encoder only runs without indent)
    stream.write(json.dumps(issues, indent=2 if len(issues) <= 1000 else None, sort_keys=True) + "\n")
