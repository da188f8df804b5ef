"""What the CI formats (sarif, github, gitlab) share: repository-relative paths, severities in each platform's
words and the rule of a check id when llmdoctor passed none."""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from findings import Finding, Report
from findings.rule import Rule

SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}
GITLAB_SEVERITIES = {"error": "critical", "warning": "major", "info": "info"}


def repo_path(file: str, root: str | Path | None = None) -> str:
    """The path a CI platform resolves from the repository root: a relative path stays as given (the user ran
    llmdoctor from the checkout, as CI does); an absolute one under the working directory (GitHub's workspace)
    becomes relative to it; any other absolute path stays absolute."""
    if not file.startswith("/"):
        return file
    path = PurePosixPath(file)
    base = Path(root if root is not None else os.getcwd()).resolve().as_posix()
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def rule_of(check_id: str, report: Report, rules: dict[str, Rule] | None) -> Rule:
    """The rule llmdoctor passed for this id, else one made from the report alone."""
    if rules and check_id in rules:
        return rules[check_id]
    found = [f for f in report.findings if f.check == check_id]
    runs = [r for r in report.checks if r.id == check_id]
    summary = runs[0].summary if runs and runs[0].summary else check_id
    category = found[0].category if found else runs[0].category if runs else "environment"
    worst = max((f.severity for f in found), key=lambda s: s.rank).value if found else "info"
    return Rule(check_id, check_id, summary, summary, summary, category, worst)


def ordered_findings(report: Report, limit: int) -> tuple[list[Finding], int]:
    """At most `limit` findings, the most severe first when some must be left out; (kept, left out)."""
    if len(report.findings) <= limit:
        return list(report.findings), 0
    ranked = sorted(report.findings, key=lambda f: -f.severity.rank)
    return ranked[:limit], len(ranked) - limit
