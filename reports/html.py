"""HTML report: one self-contained file (inline CSS and SVG, no scripts, no network) with a summary and
one section per category; findings that carry plot data get inline SVG charts (reports/svg.py)."""
from __future__ import annotations

import json
from typing import TextIO

from jinja2 import Environment

from findings import Finding, Report

from reports import svg
from reports.common import resource_line, severity_counts, status_counts, summary_line, verdict
from reports.html_template import TEMPLATE


def plots_of(finding: Finding) -> list[dict]:
    """The plot dicts in a finding's data: data["plot"] (one) and/or data["plots"] (a list)."""
    data = finding.data or {}
    plots = [data["plot"]] if isinstance(data.get("plot"), dict) else []
    plots += [p for p in data.get("plots", []) if isinstance(p, dict)] if isinstance(data.get("plots"), list) else []
    return plots


def evidence_line(key: str, value) -> str:
    """'key: value' with the value as one line of JSON; multi-line text (a traceback) kept as it is."""
    if isinstance(value, str) and "\n" in value:
        return f"{key}:\n{value}"
    return f"{key}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"


def finding_view(finding: Finding) -> dict:
    charts, errors = [], []
    for plot in plots_of(finding):
        try:
            charts.append(svg.chart(plot))
        except (ValueError, TypeError) as e:  # bad plot data must not cost the user the whole report
            errors.append(str(e))
    evidence = "\n".join(evidence_line(k, v) for k, v in sorted(finding.evidence.items()))
    return {"finding": finding, "plots": charts, "plot_errors": errors, "evidence": evidence,
            "long": evidence.count("\n") > 20}


def sections(report: Report) -> list[dict]:
    out = []
    for category in report.categories():
        findings = sorted((f for f in report.findings if f.category == category),
                          key=lambda f: (-f.severity.rank, f.check))
        out.append({"category": category, "findings": [finding_view(f) for f in findings],
                    "runs": [r for r in report.checks if r.category == category]})
    return out


def render(report: Report, stream: TextIO) -> None:
    template = Environment(autoescape=True).from_string(TEMPLATE)
    stream.write(template.render(report=report, sections=sections(report), statuses=status_counts(report),
                                 severities=severity_counts(report), verdict=verdict(report),
                                 failing=report.failing(), summary=summary_line(report),
                                 loaded=resource_line(report)))
