"""What every renderer says about a report as a whole: counts, the verdict line, resource lines, compact evidence."""
from __future__ import annotations

from findings import STATUSES, Finding, Report

from reports.evidence import value_text

SEVERITIES = ("error", "warning", "info")


def status_counts(report: Report) -> dict[str, int]:
    return {status: report.status_count(status) for status in STATUSES}


def severity_counts(report: Report) -> dict[str, int]:
    return {sev: report.count(sev) for sev in SEVERITIES}


def summary_line(report: Report) -> str:
    """'12 checks in 0.84 s: 10 passed, 1 failed, 1 skipped, 0 crashed; 1 error, 0 warnings, 2 info'"""
    s, f = status_counts(report), severity_counts(report)
    return (f"{len(report.checks)} checks in {report.duration_s:.2f} s: {s['passed']} passed, {s['failed']} failed, "
            f"{s['skipped']} skipped, {s['crashed']} crashed; {_plural(f['error'], 'error')}, "
            f"{_plural(f['warning'], 'warning')}, {f['info']} info")


def resource_line(report: Report, floor_s: float = 0.01) -> str:
    """'loaded: engine 3.20 s, weights 0.41 s' (what the checks shared; trivial loads left out)."""
    slow = sorted(((s, n) for n, s in report.resources.items() if s >= floor_s), reverse=True)
    return "loaded: " + ", ".join(f"{name} {seconds:.2f} s" for seconds, name in slow) if slow else ""


def verdict(report: Report) -> str:
    failing = len(report.failing())
    if report.fail_on == "never":
        return "PASS (fail-on never)"
    if failing:
        return f"FAIL: {_plural(failing, 'finding')} at or above {report.fail_on}"
    return f"PASS: nothing at or above {report.fail_on}"


def skipped_by_reason(report: Report) -> dict[str, list[str]]:
    """reason -> check ids; eight weight checks skipped for one missing file make one line, not eight."""
    out: dict[str, list[str]] = {}
    for run in report.checks:
        if run.status == "skipped":
            out.setdefault(run.reason, []).append(run.id)
    return out


def by_category(report: Report, severities=SEVERITIES) -> list[tuple[str, list[Finding]]]:
    """(category, its findings of these severities, worst first) for the categories that have any; categories
    with an error before those whose worst is a warning, and so on, each group in catalogue order."""
    groups = []
    for category in report.categories():
        found = sorted((f for f in report.findings if f.category == category and f.severity.value in severities),
                       key=lambda f: (-f.severity.rank, f.check))
        if found:
            groups.append((category, found))
    return sorted(groups, key=lambda group: -group[1][0].severity.rank)   # stable: catalogue order kept


def compact_evidence(evidence: dict, limit: int = 160) -> str:
    """key=value pairs on one line; multi-line values (tracebacks) are summarised, not dumped."""
    parts = []
    for key, value in evidence.items():
        if isinstance(value, str) and "\n" in value:
            text = f"<{value.count(chr(10)) + 1} lines>"
        else:
            text = f"({value_text(value)})" if isinstance(value, dict) else value_text(value)  # its commas
            text = text if len(text) <= 60 else text[:57] + "..."
        parts.append(f"{key}={text}")
    line = ", ".join(parts)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def where(location) -> str:
    """'models/m/config.json:22 (vocab_size)', or with no line (a binary file)
    'models/m/model.safetensors (lm_head.weight)'."""
    text = location.file + (f":{location.line}" if location.line else "")
    return text + (f" ({location.logical})" if location.logical else "")
