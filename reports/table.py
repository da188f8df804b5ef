"""Terminal report: errors and warnings first (with their evidence, tables as aligned columns), then the info
notes, then passed checks as one compact list, skips by reason, and the summary line.

Colour only when the stream is a terminal and NO_COLOR is unset (https://no-color.org)."""
from __future__ import annotations

import os
import shutil
import textwrap
from typing import TextIO

from tabulate import tabulate

from findings import Report

from reports.summary import (by_category, compact_evidence, resource_line, skipped_by_reason, status_counts,
                            summary_line, verdict, where)
from reports.evidence import EvidenceTable, elided, split_evidence

COLOURS = {"error": "31;1", "warning": "33;1", "info": "36", "passed": "32", "failed": "31", "skipped": "2",
           "crashed": "35;1", "PASS": "32;1", "FAIL": "31;1", "heading": "1"}
INDENT = " " * 19           # under the message: "  SEVERITY  ID      "
PROBLEM_TABLE_ROWS = 40     # evidence table rows shown under an error/warning (json/html have all)
NOTE_TABLE_ROWS = 16        # ... under an info note


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def render(report: Report, stream: TextIO, colour: bool | None = None) -> None:
    paint = _painter(use_colour(stream) if colour is None else colour)
    width = min(shutil.get_terminal_size((100, 24)).columns, 120) if use_colour(stream) else 100
    stream.write(f"llmdoctor {report.tool_version}  {report.model}  ({report.device}, {report.dtype})\n")
    stream.write(f"fingerprint {report.fingerprint or '-'}\n\n")
    stream.write(category_table(report, paint) + "\n")
    for block in (problems_block(report, paint, width), notes_block(report, paint, width),
                  passed_block(report, width), skipped_block(report)):
        if block:
            stream.write("\n" + block + "\n")
    word = verdict(report)
    loaded = resource_line(report)
    stream.write(f"\n{summary_line(report)}\n" + (f"{loaded}\n" if loaded else "")
                 + f"{paint(word.split(':')[0].split(' ')[0], word)}\n")


def problems_block(report: Report, paint, width: int) -> str:
    if not report.checks and not report.findings:
        return ""
    body = findings_table(report, paint, width, severities=("error", "warning"))
    return paint("heading", "problems") + "\n" + (body or "  no errors or warnings")


def notes_block(report: Report, paint, width: int) -> str:
    notes = [f for f in report.findings if f.severity.value == "info"]
    if not notes:
        return ""
    lines = [paint("heading", "notes")]
    for check_id in dict.fromkeys(f.check for f in notes):
        lines += check_lines([f for f in notes if f.check == check_id], paint, width, 5, NOTE_TABLE_ROWS)
    return "\n".join(lines)


def passed_block(report: Report, width: int) -> str:
    """Passed checks collapsed to their ids: one wrapped list (`llmdoctor explain ID` says what each checks)."""
    ids = [run.id for run in report.checks if run.status == "passed"]
    if not ids:
        return ""
    return textwrap.fill(", ".join(ids), width=max(width, 40), initial_indent=f"passed ({len(ids)}): ",
                         subsequent_indent="  ", break_on_hyphens=False)


def skipped_block(report: Report) -> str:
    skipped = skipped_by_reason(report)
    return "\n".join(["skipped:"] + [f"  {', '.join(ids)}: {reason}" for reason, ids in skipped.items()]) \
        if skipped else ""


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


def findings_table(report: Report, paint, width: int = 100, per_check: int = 5,
                   severities: tuple[str, ...] = ("error", "warning", "info")) -> str:
    """Findings of these severities under a heading per category: severity, id, message, evidence; the hint
    once per check.

    Categories holding an error come first, then those with warnings, each in catalogue order. A check that
    reports many findings (one per tensor, say) shows its `per_check` worst and a count of the rest, so one
    truncated file does not bury every other category; --format json has them all."""
    blocks = []
    for category, found in by_category(report, severities):
        lines = [paint("heading", f"  {category}")]
        for check_id in dict.fromkeys(f.check for f in found):
            lines += check_lines([f for f in found if f.check == check_id], paint, width, per_check,
                                 PROBLEM_TABLE_ROWS)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def check_lines(found: list, paint, width: int, per_check: int, table_rows: int = PROBLEM_TABLE_ROWS) -> list[str]:
    lines = []
    for f in found[:per_check]:
        head = f"  {paint(f.severity.value, f.severity.value.upper().ljust(7))}  {f.check:<6}  "
        lines.append(head + _wrap(f.message + ("  [known]" if f.known else ""), width, INDENT).lstrip())
        if f.location is not None and f.location.file:
            lines.append(_wrap("at: " + where(f.location), width, INDENT))
        items, tables = split_evidence(f.evidence)
        if items:
            lines.append(_wrap("evidence: " + compact_evidence(dict(items)), width, INDENT))
        lines += [line for table in tables for line in table_lines(table, table_rows)]
    if len(found) > per_check:
        more = len(found) - per_check
        lines.append(f"{INDENT}... and {more} more {found[0].check} findings (--format json lists all)")
    hints = list(dict.fromkeys(f.hint for f in found[:per_check] if f.hint))
    lines += [_wrap("hint: " + hint, width, INDENT) for hint in hints]
    return lines


def table_lines(table: EvidenceTable, limit: int) -> list[str]:
    """An evidence table as aligned columns under its key; long ones keep their first and last rows."""
    rows, left_out = elided(table.rows, limit)
    if left_out:
        half = (limit + 1) // 2
        rows = rows[:half] + [["..."] * len(table.columns)] + rows[half:]
    # headers wrap at their words to the width of their column's values: "nonfinite_logits" over a column of 0s
    # takes two lines, not 16 characters of every row
    headers = [c.replace("_", " ") for c in table.columns]
    widths = [max([len(word) for word in h.split()] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True, maxheadercolwidths=widths,
                    colalign=["right" if n else "left" for n in table.numeric])
    lines = [f"{INDENT}{table.key}: {len(table.rows)} rows" + (f" ({left_out} not shown: --format html or json "
                                                                f"has all)" if left_out else "")]
    return lines + [INDENT + line for line in text.splitlines()]


def _wrap(text: str, width: int, indent: str) -> str:
    return textwrap.fill(text, width=max(width, 40), initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)


def _painter(enabled: bool):
    def paint(kind: str, text: str) -> str:
        code = COLOURS.get(kind)
        return f"\x1b[{code}m{text}\x1b[0m" if enabled and code else text
    return paint
