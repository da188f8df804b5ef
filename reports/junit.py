"""JUnit XML: one testcase per check run (passing ones too) so GitLab/GitHub/Jenkins show checks natively.

A finding at or above fail-on is a <failure type="severity">; a crashed check is an <error>; a skipped check
is <skipped>; findings below fail-on go to <system-out>."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TextIO

from findings import CheckRun, Finding, Report

from reports.summary import compact_evidence, where


def build(report: Report) -> ET.Element:
    suites = ET.Element("testsuites", name="llmdoctor")
    suite = ET.SubElement(suites, "testsuite", name=f"llmdoctor {report.model}", timestamp=report.generated_at,
                          time=f"{report.duration_s:.3f}")
    props = ET.SubElement(suite, "properties")
    for name, value in (("fingerprint", report.fingerprint or ""), ("tool_version", report.tool_version),
                        ("fail_on", report.fail_on), ("device", report.device), ("dtype", report.dtype)):
        ET.SubElement(props, "property", name=name, value=value)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for run in report.checks:
        counts["tests"] += 1
        outcome = add_testcase(suite, run, report.findings_for(run.id), report.fail_on)
        if outcome:
            counts[outcome] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
        suites.set(key, str(value))
    return suites


def add_testcase(suite: ET.Element, run: CheckRun, findings: list[Finding], fail_on: str) -> str | None:
    """Append one testcase; return which counter it bumps (failures/errors/skipped) or None for a pass."""
    case = ET.SubElement(suite, "testcase", classname=f"llmdoctor.{run.category}",
                         name=f"{run.id} {run.summary}".strip(), time=f"{run.duration_s:.3f}")
    failing = [f for f in findings if f.fails(fail_on)]
    others = [f for f in findings if not f.fails(fail_on)]
    outcome = None
    if run.status == "crashed":
        crash = findings[0] if findings else None
        error = ET.SubElement(case, "error", message=run.reason, type="crashed")
        error.text = crash.evidence.get("traceback", "") if crash else ""
        outcome = "errors"
    elif failing:
        worst = max(failing, key=lambda f: f.severity.rank)
        failure = ET.SubElement(case, "failure", message=worst.message if len(failing) == 1
                                else f"{len(failing)} findings; worst: {worst.message}", type=worst.severity.value)
        failure.text = "\n\n".join(describe(f) for f in failing)
        outcome = "failures"
    elif run.status == "skipped":
        ET.SubElement(case, "skipped", message=run.reason)
        outcome = "skipped"
    if others and run.status != "crashed":
        ET.SubElement(case, "system-out").text = "\n\n".join(describe(f) for f in others)
    return outcome


def describe(f: Finding) -> str:
    lines = [f"[{f.severity.value}] {f.check}: {f.message}"]
    if f.location is not None and f.location.file:
        lines.append(f"at: {where(f.location)}")
    if f.evidence:
        lines.append(f"evidence: {compact_evidence(f.evidence, limit=2000)}")
    if f.hint:
        lines.append(f"hint: {f.hint}")
    return "\n".join(lines)


def render(report: Report, stream: TextIO) -> None:
    tree = ET.ElementTree(build(report))
    ET.indent(tree)
    stream.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    stream.write(ET.tostring(tree.getroot(), encoding="unicode"))
    stream.write("\n")
