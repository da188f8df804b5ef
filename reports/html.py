"""HTML report: one self-contained file (inline CSS and SVG, no scripts, no network).

Errors and warnings come first, then the info notes; passed and skipped checks are collapsed below (<details>).
Evidence that is a list of records (activation statistics per layer, numerics per dtype) is a <table>; the rest
is a key/value list. Findings that carry plot data get inline SVG charts (reports/svg.py)."""
from __future__ import annotations

from typing import TextIO

from jinja2 import Environment

from findings import Finding, Report

from reports import svg
from reports.summary import (by_category, resource_line, severity_counts, skipped_by_reason, status_counts,
                            summary_line, verdict)
from reports.evidence import split_evidence, value_text
from reports.html_template import TEMPLATE

SCROLL_ROWS = 15      # evidence tables longer than this scroll inside their box (the header stays put)
LONG_TEXT_LINES = 20  # multi-line evidence (a traceback) longer than this starts folded
WIDE_FIELD = 30       # key/value items longer than this take a whole row of the evidence grid


def plots_of(finding: Finding) -> list[dict]:
    """The plot dicts in a finding's data: data["plot"] (one) and/or data["plots"] (a list)."""
    data = finding.data or {}
    plots = [data["plot"]] if isinstance(data.get("plot"), dict) else []
    plots += [p for p in data.get("plots", []) if isinstance(p, dict)] if isinstance(data.get("plots"), list) else []
    return plots


def finding_view(finding: Finding) -> dict:
    charts, errors = [], []
    for plot in plots_of(finding):
        try:
            charts.append(svg.chart(plot))
        except (ValueError, TypeError) as e:  # bad plot data must not cost the user the whole report
            errors.append(str(e))
    items, tables = split_evidence(finding.evidence)
    fields, texts = [], []
    for key, value in items:
        if isinstance(value, str) and "\n" in value:
            texts.append({"key": key, "text": value, "long": value.count("\n") >= LONG_TEXT_LINES})
        else:
            text = value_text(value)
            fields.append({"key": key, "text": text, "wide": len(key) + len(text) > WIDE_FIELD})
    return {"finding": finding, "plots": charts, "plot_errors": errors, "fields": fields, "texts": texts,
            "tables": [{"table": t, "scroll": len(t.rows) > SCROLL_ROWS} for t in tables]}


def problems(report: Report) -> list[dict]:
    """Errors and warnings: categories holding an error first, each category's worst findings first."""
    return [finding_view(f) for _, found in by_category(report, ("error", "warning")) for f in found]


def notes(report: Report) -> list[dict]:
    return [finding_view(f) for _, found in by_category(report, ("info",)) for f in found]


def passed_runs(report: Report) -> list:
    order = {c: i for i, c in enumerate(report.categories())}
    return sorted((r for r in report.checks if r.status == "passed"), key=lambda r: order.get(r.category, 0))


def render(report: Report, stream: TextIO) -> None:
    template = Environment(autoescape=True).from_string(TEMPLATE)
    stream.write(template.render(report=report, problems=problems(report), notes=notes(report),
                                 passed=passed_runs(report), skipped=skipped_by_reason(report),
                                 statuses=status_counts(report), severities=severity_counts(report),
                                 verdict=verdict(report), failing=report.failing(), summary=summary_line(report),
                                 loaded=resource_line(report)))
