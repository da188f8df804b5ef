"""Markdown report for a pull-request comment or an incident ticket (GitHub/GitLab flavoured)."""
from __future__ import annotations

import json
from typing import TextIO

from findings import Finding, Report

from reports.summary import status_counts, summary_line, verdict

PER_CHECK = 10
ICONS = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def cell(text: str) -> str:
    """Text safe inside a table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def render(report: Report, stream: TextIO) -> None:
    w = stream.write
    w(f"## llmdoctor: {verdict(report)}\n\n")
    w(f"- model: `{report.model}`\n- fingerprint: `{report.fingerprint or '-'}`\n")
    w(f"- llmdoctor {report.tool_version}, {report.device}/{report.dtype}, fail-on `{report.fail_on}`, "
      f"{report.generated_at}\n- {summary_line(report)}\n\n")
    w("| category | checks | passed | failed | skipped | crashed |\n|---|--:|--:|--:|--:|--:|\n")
    for category in report.categories():
        runs = [r for r in report.checks if r.category == category]
        counts = [sum(1 for r in runs if r.status == s) for s in status_counts(report)]
        w(f"| {category} | {len(runs)} | " + " | ".join(map(str, counts)) + " |\n")
    if report.findings:
        shown = capped(sorted(report.findings, key=lambda f: (-f.severity.rank, f.category, f.check)))
        w("\n### Findings\n\n| | check | category | message | hint |\n|---|---|---|---|---|\n")
        for f in shown:
            w(f"| {ICONS[f.severity.value]} {f.severity.value} | `{f.check}` | {f.category} | {cell(f.message)}"
              f"{place(f)} | {cell(f.hint)} |\n")
        if len(shown) < len(report.findings):
            w(f"\n{len(report.findings) - len(shown)} more findings of the same checks are in the JSON report.\n")
        w("\n<details><summary>Evidence</summary>\n\n")
        for f in shown:
            w(evidence_block(f))
        w("</details>\n")
    skipped = [r for r in report.checks if r.status == "skipped"]
    if skipped:
        w(f"\n<details><summary>{len(skipped)} skipped</summary>\n\n")
        for run in skipped:
            w(f"- `{run.id}` {cell(run.summary)}: {cell(run.reason)}\n")
        w("\n</details>\n")


def place(f: Finding) -> str:
    """' (known) at `models/m/config.json:22`' after a message; nothing for a finding without a file."""
    known = " (known)" if f.known else ""
    loc = f.location
    if loc is None or not loc.file:
        return known
    return f"{known} at `{cell(loc.file)}" + (f":{loc.line}" if loc.line else "") + "`"


def capped(findings: list[Finding]) -> list[Finding]:
    """At most PER_CHECK findings per check: a PR comment has to stay readable."""
    seen: dict[str, int] = {}
    out = []
    for f in findings:
        seen[f.check] = seen.get(f.check, 0) + 1
        if seen[f.check] <= PER_CHECK:
            out.append(f)
    return out


def evidence_block(f: Finding) -> str:
    text = json.dumps(f.evidence, indent=2, sort_keys=True, ensure_ascii=False)
    if "traceback" in f.evidence:
        text = f.evidence["traceback"]
    fence = "````" if "```" in text else "```"
    plots = "".join(plot_table(p) for p in plots_of(f))
    return f"**{f.check}** {cell(f.message)}\n\n{plots}{fence}\n{text}\n{fence}\n\n"


def plots_of(f: Finding) -> list[dict]:
    data = f.data or {}
    plots = [data["plot"]] if isinstance(data.get("plot"), dict) else []
    return plots + [p for p in data.get("plots", []) if isinstance(p, dict)] if isinstance(data.get("plots"), list) \
        else plots


def plot_table(plot: dict) -> str:
    """A plot as a Markdown table (x down the rows, one column per series): Markdown has no charts."""
    x, series = plot.get("x"), plot.get("series")
    if not isinstance(x, list) or not isinstance(series, dict) or not series:
        return ""
    names = list(series)
    out = [f"*{cell(plot.get('title', ''))}*\n\n| {cell(plot.get('x_label', 'x'))} | "
           + " | ".join(cell(n) for n in names) + " |\n|" + "---|" * (len(names) + 1) + "\n"]
    for i, label in enumerate(x):
        values = [series[n][i] if isinstance(series[n], list) and i < len(series[n]) else None for n in names]
        out.append(f"| {cell(label)} | " + " | ".join("-" if v is None else cell(_num(v)) for v in values) + " |\n")
    return "".join(out) + "\n"


def _num(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
