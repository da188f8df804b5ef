"""SARIF 2.1.0 for GitHub code scanning (`github/codeql-action/upload-sarif`): one run, tool.driver with a rule
per check in the report (docstring, explain text, default level, category tag), one result per finding with a
physical location (repository-relative path and line) plus the logical one (config key, tensor, token id) and
a partial fingerprint that is stable across runs. GitHub's limits are respected: 25,000 results per run (the
most severe kept, a notification says how many were left out) and one location per result."""
from __future__ import annotations

import json
from typing import TextIO
from urllib.parse import quote

from findings import Finding, Report
from findings.rule import Rule

from reports.ci import SARIF_LEVELS, ordered_findings, repo_path, rule_of

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
MAX_RESULTS = 25_000          # per run, GitHub code scanning's limit
FINGERPRINT_KEY = "llmdoctorFingerprint/v1"
COMPACT_ABOVE = 1000          # results


def as_dict(report: Report, rules: dict[str, Rule] | None = None) -> dict:
    kept, left_out = ordered_findings(report, MAX_RESULTS)
    ids = list(dict.fromkeys([run.id for run in report.checks] + [f.check for f in report.findings]))
    index = {check_id: i for i, check_id in enumerate(ids)}
    invocation = {"executionSuccessful": True, "exitCode": report.exit_code()}
    if left_out:
        invocation["toolExecutionNotifications"] = [{"level": "warning", "message": {
            "text": f"{left_out} findings left out: GitHub code scanning takes at most {MAX_RESULTS} results "
                    f"per run (the JSON report has them all)"}}]
    run = {"tool": {"driver": {"name": "llmdoctor", "version": report.tool_version,
                               "semanticVersion": report.tool_version,
                               "rules": [rule_dict(rule_of(i, report, rules)) for i in ids]}},
           "invocations": [invocation], "columnKind": "utf16CodeUnits",
           "results": [result(f, index[f.check], report) for f in kept],
           "properties": {"model": report.model, "modelFingerprint": report.fingerprint, "failOn": report.fail_on}}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def rule_dict(rule: Rule) -> dict:
    title, _, rest = rule.help.partition("\n")
    markdown = f"**{title}**" + (f"\n{rest}" if rest else "")
    return {"id": rule.id, "name": rule.name, "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.description}, "help": {"text": rule.help, "markdown": markdown},
            "defaultConfiguration": {"level": SARIF_LEVELS[rule.severity]},
            "properties": {"tags": [rule.category]}}


def result(finding: Finding, rule_index: int, report: Report) -> dict:
    text = finding.message + (f"\nFix: {finding.hint}" if finding.hint else "")
    out = {"ruleId": finding.check, "ruleIndex": rule_index, "level": SARIF_LEVELS[finding.severity.value],
           "message": {"text": text}, "locations": locations(finding),
           "properties": {"category": finding.category}}
    if finding.fingerprint:
        out["partialFingerprints"] = {FINGERPRINT_KEY: finding.fingerprint}
    if report.known_report is not None:
        out["baselineState"] = "unchanged" if finding.known else "new"
    return out


def locations(finding: Finding) -> list[dict]:
    loc = finding.location
    if loc is None or (loc.file is None and loc.logical is None):
        return []
    where: dict = {}
    if loc.file is not None:
        path = repo_path(loc.file)
        uri = quote(path, safe="/") if not path.startswith("/") else "file://" + quote(path, safe="/")
        physical: dict = {"artifactLocation": {"uri": uri}}
        if loc.line is not None:
            physical["region"] = {"startLine": loc.line}
        where["physicalLocation"] = physical
    if loc.logical is not None:
        where["logicalLocations"] = [{"name": loc.logical, "fullyQualifiedName":
                                      f"{loc.file.rsplit('/', 1)[-1]}:{loc.logical}" if loc.file else loc.logical}]
    return [where]


def render(report: Report, stream: TextIO, rules: dict[str, Rule] | None = None) -> None:
    data = as_dict(report, rules)
    # indented for people; a large log compact (json's fast encoder only runs without indent)
    indent = 2 if len(data["runs"][0]["results"]) <= COMPACT_ABOVE else None
    stream.write(json.dumps(data, indent=indent, allow_nan=False) + "\n")
