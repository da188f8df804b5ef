"""GitHub Actions workflow commands: one `::error file=...,line=...,title=CHECK::message` per finding (warning
and notice for the other severities, notice for a known finding), which the runner turns into annotations on
the pull request; and, when GITHUB_STEP_SUMMARY is set, a Markdown summary appended to the job's page (counts
and a table of the problems, kept under GitHub's 1 MiB limit)."""
from __future__ import annotations

import os
from typing import TextIO

from findings import Finding, Report

from reports.ci import GITHUB_COMMANDS, repo_path
from reports.summary import severity_counts, summary_line, verdict

SUMMARY_LIMIT = 1024 * 1024 - 16 * 1024   # bytes; GitHub refuses a step summary over 1 MiB


def escape_data(text: str) -> str:
    """A command's message: %, CR and LF are percent-encoded (the runner decodes them)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (file, title): also ':' and ',' which separate properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(finding: Finding) -> str:
    kind = "notice" if finding.known else GITHUB_COMMANDS[finding.severity.value]
    props = []
    loc = finding.location
    if loc is not None and loc.file is not None:
        props.append(f"file={escape_property(repo_path(loc.file))}")
        if loc.line is not None:
            props.append(f"line={loc.line}")
    props.append(f"title={escape_property(finding.check + (' (known)' if finding.known else ''))}")
    return f"::{kind} {','.join(props)}::{escape_data(finding.message)}"


def render(report: Report, stream: TextIO, rules=None, summary_path: str | None = None) -> None:
    for finding in report.findings:
        stream.write(command(finding) + "\n")
    stream.write(f"llmdoctor: {summary_line(report)}; {verdict(report)}\n")   # a plain log line, no annotation
    path = summary_path or os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(step_summary(report))


def step_summary(report: Report, limit: int = SUMMARY_LIMIT) -> str:
    """Markdown for the job summary: verdict, counts and the problems (errors and warnings), cut to `limit` bytes."""
    counts = severity_counts(report)
    known = sum(1 for f in report.findings if f.known)
    head = [f"## llmdoctor: {verdict(report)}", "", f"Model `{report.model}` · llmdoctor {report.tool_version}", "",
            "| errors | warnings | info | known |", "|---:|---:|---:|---:|",
            f"| {counts['error']} | {counts['warning']} | {counts['info']} | {known} |", "",
            summary_line(report), ""]
    problems = [f for f in report.findings if f.severity.value in ("error", "warning")]
    if not problems:
        return "\n".join(head) + "\n"
    lines = head + ["| severity | check | where | message |", "|---|---|---|---|"]
    size = len("\n".join(lines).encode())
    for shown, finding in enumerate(problems):
        row = summary_row(finding)
        if size + len(row.encode()) + 200 > limit:
            lines.append(f"\n{len(problems) - shown} more problems left out (the step summary is limited to 1 MiB)")
            break
        lines.append(row)
        size += len(row.encode()) + 1
    return "\n".join(lines) + "\n\n"


def summary_row(finding: Finding) -> str:
    loc = finding.location
    where = ""
    if loc is not None and loc.file:
        where = f"`{repo_path(loc.file)}" + (f":{loc.line}" if loc.line else "") + "`"
    if loc is not None and loc.logical:
        where += f" {_cell(loc.logical)}"
    severity = finding.severity.value + (" (known)" if finding.known else "")
    return f"| {severity} | {finding.check} | {where.strip()} | {_cell(finding.message)} |"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
