"""Every format parsed back: JSON against its schema, JUnit counts, HTML well-formed, Markdown and table text."""
from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest

from reports import FORMATS, json as json_report, render

from tests.reports.conftest import make_report

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "report.schema.json").read_text())


def rendered(report, fmt: str, **options) -> str:
    stream = io.StringIO()
    render(report, fmt, stream, **options)
    return stream.getvalue()


def test_json_matches_schema_and_keeps_field_names(sample_report):
    text = rendered(sample_report, "json")
    data = json.loads(text)
    jsonschema.validate(data, SCHEMA)
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"  # sorted keys, stable layout
    assert data["summary"] == {"checks": 9, "passed": 3, "failed": 3, "skipped": 2, "crashed": 1,
                               "error": 2, "warning": 2, "info": 2}
    assert data["exit_code"] == 1 and data["fingerprint"] == "sha256:" + "ab" * 32
    first = data["findings"][0]
    assert set(first) == {"check", "category", "severity", "message", "evidence", "hint", "data", "location",
                          "fingerprint", "known"}
    assert [c["id"] for c in data["checks"]][:2] == ["FIL001", "CFG002"]
    assert data["checks"][4]["reason"] == "needs gpu: no CUDA device"


def test_json_schema_rejects_a_broken_report(sample_report):
    data = json_report.as_dict(sample_report)
    data["findings"][0]["severity"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)


@pytest.mark.parametrize("fail_on, failures", [("error", 1), ("warning", 3), ("never", 0)])
def test_junit_counts_match_the_report(fail_on, failures):
    report = make_report(fail_on)
    root = ET.fromstring(rendered(report, "junit"))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(report.checks) == int(suite.get("tests")) == int(root.get("tests"))
    assert int(suite.get("failures")) == failures == sum(1 for c in cases if c.find("failure") is not None)
    assert int(suite.get("errors")) == 1 == sum(1 for c in cases if c.find("error") is not None)
    assert int(suite.get("skipped")) == 2 == sum(1 for c in cases if c.find("skipped") is not None)
    by_name = {c.get("name").split()[0]: c for c in cases}
    assert by_name["FIL001"].find("*") is None  # a passing check is a bare testcase
    assert "KeyError: 'merges'" in by_name["TOK005"].find("error").text
    assert by_name["GPU003"].find("skipped").get("message") == "needs gpu: no CUDA device"
    if fail_on == "error":
        assert by_name["CFG002"].find("failure").get("type") == "error"
        assert "tokenizer_len=32004" in by_name["VOC002"].find("system-out").text
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["fingerprint"].startswith("sha256:") and props["fail_on"] == fail_on


class _Checker(HTMLParser):
    """Well-formedness for HTML5: every non-void tag closed in order; records scripts and external refs."""
    VOID = {"meta", "br", "hr", "img", "input", "link", "rect", "line", "circle", "polyline", "path"}

    def __init__(self):
        super().__init__()
        self.stack, self.tags, self.external = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.external += [v for k, v in attrs if k in ("src", "href") and v and not v.startswith("#")]
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()


def test_html_is_well_formed_self_contained_and_escaped(sample_report):
    text = rendered(sample_report, "html")
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert checker.stack == [] and checker.external == [] and "script" not in checker.tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<b>now</b>" not in text
    assert re.findall(r'<(?:section|details class="group") id="(\w+)"', text) == ["problems", "notes", "passed",
                                                                                "skipped"]
    assert text.count("<svg") == 2 and "plot not drawn: unknown plot kind &#39;pie&#39;" in text
    for svg in re.findall(r"<svg.*?</svg>", text, re.S):
        ET.fromstring(svg)  # each chart is valid XML on its own
    assert "FAIL: 2 findings at or above error" in text


def test_markdown_has_tables_and_escapes_pipes(sample_report):
    text = rendered(sample_report, "markdown")
    assert text.startswith("## llmdoctor: FAIL: 2 findings at or above error")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(sample_report.findings)
    assert all(len(re.split(r"(?<!\\)\|", row)) == 7 for row in rows)  # 5 cells, pipes inside escaped
    assert "\\| pipes \\|" in text and "KeyError: 'merges'" in text
    assert "<details><summary>2 skipped</summary>" in text


def test_table_groups_by_category_and_colours_only_when_asked(sample_report, monkeypatch):
    plain = rendered(sample_report, "table", colour=False)
    assert "\x1b[" not in plain
    lines = plain.splitlines()
    assert lines[-2].startswith("9 checks in 1.62 s: 3 passed, 3 failed, 2 skipped, 1 crashed; 2 errors")
    assert lines[-1] == "FAIL: 2 findings at or above error"
    headings = [line.strip() for line in lines if line.strip() in sample_report.categories() and line.startswith("  ")
                and not line.startswith("   ")]
    # categories with errors or warnings: those holding an error first, each group in catalogue order
    assert headings == ["config", "tokenizer", "vocab", "activations"]
    assert "GPU003, GPU004: needs gpu: no CUDA device" in plain
    assert "<7 lines>" not in plain and "traceback=<3 lines>" in plain
    coloured = rendered(sample_report, "table", colour=True)
    assert "\x1b[31;1mERROR" in coloured


def test_table_honours_no_color_on_a_terminal(sample_report, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    tty = Tty()
    render(sample_report, "table", tty)
    assert "\x1b[" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    tty = Tty()
    render(sample_report, "table", tty)
    assert "\x1b[" not in tty.getvalue()


def test_every_format_renders_an_empty_report():
    from findings import Report
    empty = Report(model="m", fingerprint=None, tool_version="0", generated_at="2026-01-01T00:00:00+00:00")
    for fmt in FORMATS:
        assert rendered(empty, fmt)
    jsonschema.validate(json.loads(rendered(empty, "json")), SCHEMA)


def test_a_flood_from_one_check_is_capped_in_table_and_markdown_not_in_json():
    from findings import CheckRun, Finding, Report
    flood = [Finding("FIL002", "files", "error", f"tensor {i} runs past the end", {"i": i}, "Download it again.")
             for i in range(23)]
    report = Report(model="m", fingerprint=None, tool_version="0", generated_at="2026-01-01T00:00:00+00:00",
                    checks=[CheckRun("FIL002", "files", "failed", 0.1)], findings=flood)
    table = rendered(report, "table", colour=False)
    assert table.count("runs past the end") == 5 and "... and 18 more FIL002 findings" in table
    assert table.count("hint: Download it again.") == 1
    markdown = rendered(report, "markdown")
    assert markdown.count("| 🔴 error | `FIL002`") == 10 and "13 more findings" in markdown
    assert len(json.loads(rendered(report, "json"))["findings"]) == 23
    assert rendered(report, "html").count("runs past the end") == 23
