"""The tool-call format table (reference_engine/generate/tool_calls.py): each format reads the model outputs the
servers' own parser tests feed llama.cpp (tests/test-chat.cpp in the llama-cpp-python 0.3.36 sdist, cited by
line) and the outputs shown in the model cards; recognition on real templates; render -> parse round trips for
any name and arguments (hypothesis); broken calls are errors that stay in the content, never exceptions."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from reference_engine.generate.tool_calls import (FORMATS, ToolCall, find_calls, mentions_tools, parse_calls,
                                                  recognise, render_calls)

TEMPLATES = Path(__file__).parents[2] / "checks" / "tokenizer" / "tool_templates"
ARG1 = {"arg1": 1}


def calls_of(parsed) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in parsed.calls]


# (format, generated text, expected calls, expected content)
OUTPUTS = [
    # llama.cpp tests/test-chat.cpp:5917 (Mistral Nemo), :2618 (Mistral Small 3.2 / v11)
    ("mistral_v3", '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
     [("special_function", ARG1)], ""),
    ("mistral_v11", '[TOOL_CALLS]special_function[ARGS]{"arg1":1}', [("special_function", ARG1)], ""),
    # Mistral-7B-Instruct-v0.3's model card (function calling example): a space after the marker
    ("mistral_v3", '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", '
                   '"format": "celsius"}}]',
     [("get_current_weather", {"location": "Paris, France", "format": "celsius"})], ""),
    # test-chat.cpp:5934 (Functionary v3.1), :5971 (FireFunction v2), :6192 (Apriel 1.5)
    ("functionary_v3_1", '<function=special_function>{"arg1": 1}</function>', [("special_function", ARG1)], ""),
    ("firefunction_v2", ' functools[{"name": "special_function", "arguments": {"arg1": 1}}]',
     [("special_function", ARG1)], ""),
    ("apriel", '<tool_calls>[{"name": "special_function", "arguments": {"arg1": 1}}]</tool_calls>',
     [("special_function", ARG1)], ""),
    # test-chat.cpp:2837 (Command R7B with its thinking block, which stays content here)
    ("command_r7b", '<|START_THINKING|>I\'m\nthinking<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", '
                    '"tool_name": "special_function", "parameters": {"arg1": 1}}\n]<|END_ACTION|>',
     [("special_function", ARG1)], "<|START_THINKING|>I'm\nthinking<|END_THINKING|>"),
    # test-chat.cpp:3966 (DeepSeek V3.1, two calls after content), :6030 (DeepSeek R1, no newline before ```)
    ("deepseek_v3_1", 'CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Paris"}'
                      '<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
                      '<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
     [("get_time", {"city": "Paris"}), ("get_weather", {"city": "Paris"})], "CONTENT"),
    ("deepseek_r1", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n```json\n'
                    '{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>', [("special_function", ARG1)], ""),
    # Qwen's function-calling guide (Qwen2.5, two calls in one turn)
    ("hermes", '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA"}}'
               '\n</tool_call>\n<tool_call>\n{"name": "get_temperature_date", "arguments": {"location": '
               '"San Francisco, CA, USA", "date": "2024-10-01"}}\n</tool_call>',
     [("get_current_temperature", {"location": "San Francisco, CA, USA"}),
      ("get_temperature_date", {"location": "San Francisco, CA, USA", "date": "2024-10-01"})], ""),
    # generation stopped at EOS before the closing tag (vLLM's hermes parser reads it too)
    ("hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
     [("get_weather", {"city": "Paris"})], "Let me check."),
    # Meta's Llama 3.1 prompt-format guide: a built-in tool and a JSON custom-tool call
    ("llama3_json", '<|python_tag|>brave_search.call(query="current weather in Menlo Park, California")',
     [("brave_search", {"query": "current weather in Menlo Park, California"})], ""),
    ("llama3_json", '{"name": "get_current_conditions", "parameters": {"location": "San Francisco, CA", '
                    '"unit": "Fahrenheit"}}',
     [("get_current_conditions", {"location": "San Francisco, CA", "unit": "Fahrenheit"})], ""),
    ("llama3_json", '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"x": [1, 2]}}',
     [("a", {}), ("b", {"x": [1, 2]})], ""),
    # Functionary v3.2: the generation prompt ends with ">>>", so the reply is passed with it
    ("functionary_v3_2", '>>>all\nLet me look that up.>>>get_weather\n{"city": "Paris"}',
     [("get_weather", {"city": "Paris"})], "Let me look that up."),
    ("qwen3_coder", '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis, France\n</parameter>\n'
                    '<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>',
     [("get_weather", {"city": "Paris, France", "days": 3})], ""),
    ("granite", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
     [("get_weather", {"city": "Paris"})], ""),
    ("minimax_m1", '<tool_calls>\n{"name": "a", "arguments": {"x": 1}}\n{"name": "b", "arguments": {}}\n'
                   '</tool_calls>', [("a", {"x": 1}), ("b", {})], ""),
]


@pytest.mark.parametrize("fmt,text,calls,content", OUTPUTS)
def test_real_outputs_parse(fmt, text, calls, content):
    parsed = parse_calls(fmt, text)
    assert parsed.errors == [] and calls_of(parsed) == calls and parsed.content == content
    assert parsed.format == fmt


@pytest.mark.parametrize("fmt,text,calls,content", OUTPUTS)
def test_find_calls_names_a_format_that_reads_the_same_calls(fmt, text, calls, content):
    found = find_calls(text)
    assert found is not None and calls_of(found) == calls


def test_mistral_v11_call_id_and_several_calls():
    parsed = parse_calls("mistral_v11", 'ok[TOOL_CALLS]a[CALL_ID]abc123def[ARGS]{"x": 1}[TOOL_CALLS]b[ARGS]{}')
    assert calls_of(parsed) == [("a", {"x": 1}), ("b", {})] and parsed.calls[0].id == "abc123def"
    assert parsed.content == "ok"


@pytest.mark.parametrize("fmt,text,why", [
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>', "not followed by JSON"),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}\n</tool_call>', "double-encoded"),
    ("hermes", '<tool_call>\n{"arguments": {"a": 1}}\n</tool_call>', "no 'name'"),
    ("mistral_v3", "[TOOL_CALLS] [{'name': 'f', 'arguments': {}}]", "not followed by JSON"),
    ("mistral_v11", "[TOOL_CALLS]f[ARGS]not json", "not followed by a JSON object"),
    ("llama3_json", '{"name": "f", "parameters": [1]}', "not an object"),
    ("deepseek_v3_1", "<｜tool▁call▁begin｜>f<｜tool▁call▁end｜>", "holds no name"),
])
def test_broken_calls_are_errors_and_stay_in_the_content(fmt, text, why):
    parsed = parse_calls(fmt, text)
    assert parsed.calls == [] and why in parsed.errors[0]
    assert parsed.content == text.strip()


def test_plain_text_holds_no_call():
    assert find_calls("The weather in Paris is sunny, 22 degrees.") is None
    assert find_calls('Here is JSON: {"temperature": 22}') is None
    assert parse_calls("llama3_json", "I cannot call tools.").content == "I cannot call tools."


@pytest.mark.parametrize("name,fmt", [
    ("qwen2.5-7b-instruct", "hermes"), ("hermes-3-llama-3.1-8b", "hermes"), ("llama-3.1-8b-instruct", "llama3_json"),
    ("mistral-nemo-instruct-2407", "mistral_v3"), ("mistral-small-3.2-24b-instruct-2506", "mistral_v11"),
    ("granite-3.3-2b-instruct", "granite"), ("functionary-medium-v3.2", "functionary_v3_2"),
    ("command-r7b-12-2024", "command_r7b"), ("deepseek-r1-distill-qwen-32b", "deepseek_r1")])
def test_real_templates_are_recognised(name, fmt):
    template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    assert mentions_tools(template) and recognise(template).name == fmt


def test_templates_without_tools():
    smollm2 = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
               "'<|im_end|>' + '\n'}}{% endfor %}")
    assert not mentions_tools(smollm2) and recognise(smollm2) is None
    assert not mentions_tools(None) and recognise("") is None


def test_openai_entries():
    call = ToolCall.from_openai({"id": "c1", "type": "function",
                                 "function": {"name": "f", "arguments": '{"a": [1, 2]}'}})
    assert call == ToolCall("f", {"a": [1, 2]}, "c1")
    assert ToolCall.from_openai(call.as_openai()) == call
    with pytest.raises(ValueError, match="double-encoded"):
        ToolCall.from_openai({"function": {"name": "f", "arguments": '"{\\"a\\": 1}"'}})
    with pytest.raises(ValueError, match="not JSON"):
        ToolCall.from_openai({"function": {"name": "f", "arguments": "{a: 1}"}})
    with pytest.raises(ValueError, match="not a function call"):
        ToolCall.from_openai({"function": {"arguments": "{}"}})


def test_unknown_format_is_a_key_error():
    with pytest.raises(KeyError, match="unknown tool-call format 'nope'"):
        parse_calls("nope", "")


# ">>>all" is Functionary's recipient for plain content, never a function name
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True).filter(lambda n: n != "all")
VALUES = st.one_of(st.text(max_size=20), st.integers(-10**6, 10**6), st.booleans(),
                   st.lists(st.integers(0, 9), max_size=3))
ARGS = st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), VALUES, max_size=4)


@settings(max_examples=60, deadline=None)
@given(fmt=st.sampled_from(sorted(FORMATS)), calls=st.lists(st.tuples(NAMES, ARGS), min_size=1, max_size=3))
def test_render_then_parse_round_trips(fmt, calls):
    spec = FORMATS[fmt]
    calls = [ToolCall(n, a) for n, a in calls][: None if spec.parallel else 1]
    if fmt == "qwen3_coder":    # strings are written bare: keep those that do not read as JSON or hold newlines
        calls = [ToolCall(c.name, {k: v for k, v in c.arguments.items() if not isinstance(v, str)})
                 for c in calls]
    parsed = parse_calls(spec, render_calls(spec, calls))
    assert parsed.errors == [] and calls_of(parsed) == [(c.name, c.arguments) for c in calls]


def test_find_calls_reports_a_marked_call_it_cannot_read():
    """A Hermes call with double-encoded arguments (what llama-cpp-python's history makes SmolLM2 copy) is still a
    call left in content: found, with the parse error, never None."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Tokyo\\"}"}\n</tool_call>'
    found = find_calls(text, ["hermes"])
    assert found is not None and found.format == "hermes" and not found.calls
    assert "double-encoded" in found.errors[0]
    assert find_calls(text) is not None           # by the table alone too (qwen3_coder shares the marker)
