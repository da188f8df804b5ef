"""Terminal report: a per-category summary, the findings grouped by category, skips, and one summary line.

Colour only when the stream is a terminal and NO_COLOR is unset (https://no-color.org)."""
from __future__ import annotations

import os
import shutil
import textwrap
from typing import TextIO

from tabulate import tabulate

from findings import Report

from reports.common import compact_evidence, resource_line, status_counts, summary_line, verdict

COLOURS = {"error": "31;1", "warning": "33;1", "info": "36", "passed": "32", "failed": "31", "skipped": "2",
           "crashed": "35;1", "PASS": "32;1", "FAIL": "31;1", "heading": "1"}


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def render(report: Report, stream: TextIO, colour: bool | None = None) -> None:
    paint = _painter(use_colour(stream) if colour is None else colour)
    stream.write(f"llmdoctor {report.tool_version}  {report.model}  ({report.device}, {report.dtype})\n")
    stream.write(f"fingerprint {report.fingerprint or '-'}\n\n")
    stream.write(category_table(report, paint) + "\n")
    if report.findings:
        width = min(shutil.get_terminal_size((100, 24)).columns, 120) if use_colour(stream) else 100
        stream.write("\n" + findings_table(report, paint, width) + "\n")
    skipped = skipped_by_reason(report)
    if skipped:
        stream.write("\nskipped:\n")
        for reason, ids in skipped.items():
            stream.write(f"  {', '.join(ids)}: {reason}\n")
    word = verdict(report)
    loaded = resource_line(report)
    stream.write(f"\n{summary_line(report)}\n" + (f"{loaded}\n" if loaded else "")
                 + f"{paint(word.split(':')[0].split(' ')[0], word)}\n")


def skipped_by_reason(report: Report) -> dict[str, list[str]]:
    """reason -> check ids; eight weight checks skipped for one missing file make one line, not eight."""
    out: dict[str, list[str]] = {}
    for run in report.checks:
        if run.status == "skipped":
            out.setdefault(run.reason, []).append(run.id)
    return out


def category_table(report: Report, paint) -> str:
    rows = []
    for category in report.categories():
        runs = [r for r in report.checks if r.category == category]
        counts = {s: sum(1 for r in runs if r.status == s) for s in status_counts(report)}
        rows.append([category, len(runs)] + [paint(s, str(n)) if n and s != "passed" else str(n)
                                             for s, n in counts.items()]
                    + [f"{sum(r.duration_s for r in runs):.2f}"])
    return tabulate(rows, headers=["category", "checks", "passed", "failed", "skipped", "crashed", "time s"],
                    tablefmt="simple", colalign=("left",) + ("right",) * 6, disable_numparse=True)


def findings_table(report: Report, paint, width: int = 100, per_check: int = 5) -> str:
    """Findings under a heading per category: severity, id, message, evidence; the hint once per check.

    A check that reports many findings (one per tensor, say) shows its `per_check` worst and a count of
    the rest, so one truncated file does not bury every other category; --format json has them all."""
    blocks = []
    for category in report.categories():
        found = sorted((f for f in report.findings if f.category == category), key=lambda f: (-f.severity.rank, f.check))
        if found:
            lines = [paint("heading", category)]
            for check_id in dict.fromkeys(f.check for f in found):
                lines += check_lines([f for f in found if f.check == check_id], paint, width, per_check)
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def check_lines(found: list, paint, width: int, per_check: int) -> list[str]:
    indent = " " * 19  # under the message: "  SEVERITY  ID      "
    lines = []
    for f in found[:per_check]:
        head = f"  {paint(f.severity.value, f.severity.value.upper().ljust(7))}  {f.check:<6}  "
        lines.append(head + _wrap(f.message, width, indent).lstrip())
        if f.evidence:
            lines.append(_wrap("evidence: " + compact_evidence(f.evidence), width, indent))
    if len(found) > per_check:
        lines.append(f"{indent}... and {len(found) - per_check} more {found[0].check} findings (--format json lists all)")
    hints = list(dict.fromkeys(f.hint for f in found[:per_check] if f.hint))
    lines += [_wrap("hint: " + hint, width, indent) for hint in hints]
    return lines


def _wrap(text: str, width: int, indent: str) -> str:
    return textwrap.fill(text, width=max(width, 40), initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)


def _painter(enabled: bool):
    def paint(kind: str, text: str) -> str:
        code = COLOURS.get(kind)
        return f"\x1b[{code}m{text}\x1b[0m" if enabled and code else text
    return paint
