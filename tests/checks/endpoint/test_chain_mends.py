"""The serving-chain mends on the fake server: findings kept across a server error, no raw-call alarm on
the plain answers small healthy models give, renders cached by content, prompt counts with the BOS a server adds,
EPT084's near tie judged by the served model's own logprobs; and a harmony (gpt-oss) server's failures.
"""
from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from checks.endpoint.chain import answers, calls
from checks.endpoint.reference import Reference
from tests import chain_assets
from tests.checks import zoo
from tests.checks.endpoint.chain_fake import REASONING, HealthyServer
from tests.checks.endpoint.test_chain import flagged, probe
from tests.checks.tokenizer.test_tool_template import HARMONY, TEMPLATES, family_tokens

# Plain answers SmolLM2-135M-Instruct gave (greedy, the reference engine, 48 tokens) to a tool-less question
# asking for JSON, and the first two answers the issue names: none is a call in any template's format.
PLAIN = ['{\n  "city": "Tokyo",\n  "unit": "Mumbai"\n}\n```\n\nThis JSON object is a JSON-compatible JSON string '
         'that can be used to create a JSON-compatible JSON string.',
         '{"city": "Tokyo", "unit": "celsius"}',
         ">>> 2 + 3\n5\n>>> print('done')",
         "The weather in Tokyo is a mix of hot and cold, with a high of 32°C (90°F) and a low of 22°C (72°F)."]


@pytest.fixture(scope="module")
def tools_ref():
    return Reference.load(chain_assets.model_dir("tools"))


@pytest.fixture(scope="module")
def harmony_ref(factory_model_dir, tmp_path_factory):
    """A factory Llama with gpt-oss's real template and harmony's special tokens (the model is never run)."""
    target = tmp_path_factory.mktemp("harmony") / "model"
    shutil.copytree(factory_model_dir("llama"), target)
    template = (TEMPLATES / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
    zoo.both(zoo.edit_tokenizer(family_tokens(HARMONY)),
             zoo.edit_json("tokenizer_config.json", chat_template=template, bos_token="<|startoftext|>",
                           eos_token="<|return|>"))(target)
    return Reference.load(target)


@pytest.fixture(scope="module")
def bos_ref(factory_model_dir, tmp_path_factory):
    """A factory Llama whose tokenizer adds BOS, with the chain's Hermes tool template."""
    target = tmp_path_factory.mktemp("bos") / "model"
    shutil.copytree(factory_model_dir("llama"), target)
    zoo.both(zoo.edit_tokenizer(family_tokens(["<tool_call>", "</tool_call>"])),
             zoo.edit_json("tokenizer_config.json", chat_template=chain_assets.TOOL_TEMPLATE))(target)
    return Reference.load(target)


@pytest.mark.assets
def test_findings_before_a_server_error_are_kept(tools_ref):
    """A 503 on the third tool request: EPT071's error on the first answer stays, the failure sits beside it."""
    class FailsRequired(HealthyServer):
        def __call__(self, method, path, body):
            if body and body.get("tool_choice") == "required":
                return 503, {"error": {"message": "overloaded"}}
            return super().__call__(method, path, body)
    report = probe(tools_ref, "args-schema", select=["EPT071"], server=FailsRequired(tools_ref))
    levels = [(f.severity.value, "kelvin" in f.message or "failed a probe request" in f.message)
              for f in report.findings]
    assert levels == [("error", True), ("warning", True)]


@pytest.mark.assets
@pytest.mark.parametrize("text", PLAIN)
def test_plain_answers_are_no_call_left_as_text(tools_ref, text):
    """A healthy server whose model answers the tool request in plain text: EPT071 stays quiet."""
    class Plain(HealthyServer):
        def message(self, body):
            return ({"content": text}, "stop", []) if body.get("tools") else super().message(body)
    report = probe(tools_ref, server=Plain(tools_ref), select=["EPT071"])
    assert flagged(report) == {}, [f.message for f in report.findings]


@pytest.mark.parametrize("template", ["llama-3.1-8b-instruct", "functionary-medium-v3.2", "qwen2.5-7b-instruct",
                                      "openai-gpt-oss-120b", None])
def test_raw_calls_read_only_the_templates_own_format(template):
    source = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8") if template else "{{ messages }}"
    assert [calls.raw_calls(text, source) for text in PLAIN] == [None] * len(PLAIN)


def test_raw_calls_still_read_the_own_format():
    hermes = (TEMPLATES / "qwen2.5-7b-instruct.jinja").read_text(encoding="utf-8")
    found = calls.raw_calls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>',
                            hermes)
    assert found.format == "hermes" and [c.name for c in found.calls] == ["get_weather"]
    llama = (TEMPLATES / "llama-3.1-8b-instruct.jinja").read_text(encoding="utf-8")
    found = calls.raw_calls('{"name": "get_weather", "parameters": {"city": "Tokyo"}}', llama)
    assert found.format == "llama3_json" and found.calls[0].arguments == {"city": "Tokyo"}


@pytest.mark.assets
def test_renders_are_cached_by_content_not_by_id(tools_ref):
    ctx = SimpleNamespace(state={}, reference=tools_ref)
    messages = [{"role": "user", "content": "first question"}]
    first = answers.reference_render(ctx, messages)
    messages[0]["content"] = "another question"           # the same list object (the same id), new content
    second = answers.reference_render(ctx, messages)
    assert "first question" in first and "another question" in second


def test_prompt_counts_carry_the_bos_a_server_adds(bos_ref):
    ctx = SimpleNamespace(state={}, reference=bos_ref)
    text = answers.reference_render(ctx, [{"role": "user", "content": "hi"}])
    plain = bos_ref.tokenizer.encode(text, add_special_tokens=False)
    assert answers.count(ctx, text) == len(plain) + 1
    assert answers.count(ctx, bos_ref.tokenizer.bos_token + text) == len(plain) + 1       # no double count


def test_tools_dropped_by_a_server_that_adds_bos_is_caught(bos_ref):
    """The server counts its BOS: 1 above the reference's plain count without tools, still far below with them."""
    class AddsBos(HealthyServer):
        def count(self, body):
            return super().count(body) + 1
    report = probe(bos_ref, "tools-dropped", select=["EPT073"], server=AddsBos(bos_ref))
    assert [f.severity.value for f in report.findings] == ["error"]
    assert "dropped `tools`" in report.findings[0].message
    assert flagged(probe(bos_ref, select=["EPT073"], server=AddsBos(bos_ref))) == {}


@pytest.mark.assets
def test_a_near_tie_is_judged_by_the_served_models_own_logprobs(tools_ref):
    """The streamed answer flips a token the server itself puts 0.2 nats behind its pick: info, not an error
    (the reference is never asked); the same flip with the runner-up 3 nats behind is an error."""
    def server(gap):
        class NearTie(HealthyServer):
            def __call__(self, method, path, body):
                status, answer = super().__call__(method, path, body)
                if body and body.get("stream") and not body.get("tools") and isinstance(answer, list):
                    for event in answer:
                        for choice in event.get("choices") or []:
                            lp = (choice.get("logprobs") or {}).get("content") or []
                            if choice["delta"].get("content") == " sea" and lp:
                                choice["delta"]["content"] = " ocean"
                                lp[0].update(token=" ocean", top_logprobs=[{"token": " ocean", "logprob": -0.6},
                                                                           {"token": " sea", "logprob": -0.6 - gap}])
                return status, answer
        return NearTie(tools_ref)
    tie = probe(tools_ref, server=server(0.2), select=["EPT084"])
    assert [f.severity.value for f in tie.findings] == ["info"] and "near tie" in tie.findings[0].message
    far = probe(tools_ref, server=server(3.0), select=["EPT084"])
    assert [f.severity.value for f in far.findings] == ["error"] and "not a near tie" in far.findings[0].message


def test_one_weather_tool_and_one_call_class():
    from checks.endpoint.chain import scenarios
    from checks.shared.chat.tool_conversations import WEATHER_TOOL
    from probes.endpoint import chain
    from reference_engine.generate import tool_calls
    assert scenarios.WEATHER is WEATHER_TOOL and chain.ToolCall is tool_calls.ToolCall
    raw = chain.parse_answer({"choices": [{"message": {"tool_calls": [{"function": {
        "name": "get_weather", "arguments": '{"city": "Tokyo"'}}]}}]}).tool_calls[0]
    assert raw.arguments == '{"city": "Tokyo"' and "not JSON" in raw.decoded()[1]      # kept as sent


# ------------------------------------------------------------------------------------------------ harmony

CALL_TEXT = ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
             '{"city": "Tokyo", "unit": "celsius"}<|call|>')


class HarmonyServer(HealthyServer):
    """A gpt-oss server: healthy, or with one of the harmony parser failures of sglang#9190, vllm#23694 and
    llama.cpp#15789."""

    def __init__(self, ref, fault=None):
        super().__init__(ref)
        self.fault = fault

    def message(self, body):
        message, finish, tokens = super().message(body)
        f = self.fault
        if f == "call-as-text" and message.get("tool_calls"):
            return {"content": CALL_TEXT}, "stop", []
        if f == "analysis-beside-call" and message.get("tool_calls"):
            return {**message, "content": "<|channel|>analysis<|message|>The user wants the weather.<|end|>"}, \
                finish, tokens
        if "reasoning_content" in message and f == "markup-in-content":
            return {"content": f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>"
                               f"final<|message|>{message['content']}"}, finish, tokens
        if "reasoning_content" in message and f == "stripped":
            return {"content": f"analysis{REASONING}assistantfinal{message['content']}",
                    "reasoning_content": ""}, finish, tokens
        if "reasoning_content" in message and f == "final-in-reasoning":
            return {"content": "", "reasoning_content": REASONING + message["content"]}, finish, tokens
        return message, finish, tokens


def test_harmony_healthy_server_is_quiet(harmony_ref):
    report = probe(harmony_ref, server=HarmonyServer(harmony_ref), select=["EPT071", "EPT081"])
    assert flagged(report) == {}
    assert {r.id: r.status for r in report.checks} == {"EPT071": "passed", "EPT081": "passed"}


@pytest.mark.parametrize("fault, check, words", [
    ("call-as-text", "EPT071", "left the call as raw text"),
    ("analysis-beside-call", "EPT071", "channel markup left in content"),
    ("markup-in-content", "EPT081", "channel markup left in content"),
    ("stripped", "EPT081", "a header without its special tokens"),
    ("final-in-reasoning", "EPT081", "final answer is in the reasoning field"),
])
def test_harmony_server_failures_are_caught(harmony_ref, fault, check, words):
    report = probe(harmony_ref, server=HarmonyServer(harmony_ref, fault), select=[check])
    hits = [f for f in report.findings if f.severity.value == "error" and words in f.message]
    assert hits, [(f.severity.value, f.message) for f in report.findings]
    if fault == "call-as-text":
        assert hits[0].evidence["format"] == "harmony"
    assert json.dumps(hits[0].evidence)


@pytest.mark.assets
def test_tool_choice_notes_before_a_server_error_are_kept(tools_ref):
    """EPT074: the "required" answer's warning stays when the named-choice request then fails with a 503."""
    class NoCallThenFails(HealthyServer):
        def __call__(self, method, path, body):
            if body and isinstance(body.get("tool_choice"), dict):
                return 503, {"error": {"message": "overloaded"}}
            return super().__call__(method, path, body)

        def message(self, body):
            if body.get("tool_choice") == "required":
                return {"content": "It is sunny in Tokyo."}, "stop", []
            return super().message(body)
    report = probe(tools_ref, select=["EPT074"], server=NoCallThenFails(tools_ref))
    assert [(f.severity.value, f.message.split(":")[0]) for f in report.findings] == [
        ("warning", 'tool_choice "required" was accepted but the answer holds no tool call'),
        ("warning", "the server failed a probe request")]
    assert report.findings[1].evidence["findings_before"] == 1


@pytest.mark.assets
def test_parity_findings_before_a_server_error_are_kept(tools_ref):
    """EPT084: the streamed answer's divergence stays when a later request (the shared prefix) fails with a 503."""
    class FailsPrefix(HealthyServer):
        def __call__(self, method, path, body):
            if body and body["messages"][0]["role"] == "system" and not body.get("tools"):
                return 503, {"error": {"message": "overloaded"}}
            return super().__call__(method, path, body)
    report = probe(tools_ref, "stream-diverge", select=["EPT084"], server=FailsPrefix(tools_ref))
    assert [(f.severity.value, f.message.split(":")[0]) for f in report.findings] == [
        ("error", "non-streamed vs streamed (repeated)"), ("warning", "the server failed a probe request")]
    assert report.findings[0].evidence["first_differing_token"]["position"] == 4
