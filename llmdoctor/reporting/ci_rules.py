"""The rules of a report for the CI formats (SARIF's tool.driver.rules): each check id in the report with its
docstring and explain text, probe ids with their one-line summaries, and a generic rule for a check module
that failed to import."""
from __future__ import annotations

import checks
from checks.catalogue.registry import REGISTRY, RETIRED
from findings import Report
from findings.rule import Rule
from llmdoctor.reporting.explain_text import describe_check
from llmdoctor.reporting.probe_report import SUMMARIES


def rules_for(report: Report) -> dict[str, Rule]:
    checks.load_all()
    ids = list(dict.fromkeys([run.id for run in report.checks] + [f.check for f in report.findings]))
    return {check_id: rule_for(check_id, report) for check_id in ids}


def rule_for(check_id: str, report: Report) -> Rule:
    spec = REGISTRY.get(RETIRED.get(check_id, (check_id,))[0])
    if spec is not None:
        description = spec.summary + ("\n\n" + spec.doc if spec.doc else "")
        return Rule(check_id, spec.func.__name__, spec.summary, description, describe_check(spec), spec.category,
                    spec.severity.value)
    found = [f for f in report.findings if f.check == check_id]
    category = found[0].category if found else next(r.category for r in report.checks if r.id == check_id)
    worst = max((f.severity for f in found), key=lambda s: s.rank, default=None)
    if check_id in SUMMARIES:
        summary = SUMMARIES[check_id]
        text = f"{check_id}: {summary}\n\nA probe finding: `llmdoctor probe` and `llmdoctor triage` produce it."
        return Rule(check_id, check_id.lower(), summary, summary, text, category, worst.value if worst else "info")
    summary = f"check module {check_id} could not be imported"
    text = f"{summary}: a bug in llmdoctor or its installation; the finding carries the traceback."
    return Rule(check_id, check_id.replace(".", "_"), summary, text, text, category, "error")


def render_options(report: Report, fmt: str) -> dict:
    """What a renderer needs beyond the report: the rules, for SARIF."""
    return {"rules": rules_for(report)} if fmt == "sarif" else {}
