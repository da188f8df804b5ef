"""How each tool-call format is written and read: one render and one parse function per shape of call.

Formats that share a shape share the functions (a marker followed by JSON serves Hermes, Granite, Mistral v3,
FireFunction and Command R7B alike); tool_calls.py binds them to the families in its table. Every parser takes
the generated text and returns ParsedCalls; none raises. Where a server's parser also accepts a variant the
model emits (a Hermes call whose closing tag never came because generation stopped at EOS, Llama's
`<|python_tag|>` before the JSON, several Llama calls joined by ";"), this reads it too, as vLLM and llama.cpp do.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import regex

from reference_engine.generate.tool_call_types import (ParsedCalls, ToolCall, call_from_object, dumps,
                                                       read_json)

Span = tuple[int, int]


def _finish(fmt: str, text: str, calls: list[ToolCall], spans: list[Span], errors: list[str]) -> ParsedCalls:
    """Cut the spans of the calls that parsed out of the text; what is left is the content."""
    content, last = [], 0
    for start, end in sorted(spans):
        content.append(text[last:start])
        last = end
    content.append(text[last:])
    return ParsedCalls(fmt, calls, "".join(content).strip(), errors)


def _objects(value) -> list:
    return value if isinstance(value, list) else [value]


# --- a marker, then a JSON object or list of call objects, then an optional closing marker -------------------

def marker_json_parser(fmt: str, open_: str, close: str | None = None, *, name_key: str = "name",
                       argument_keys=("arguments", "parameters"), id_key: str | None = "id") -> Callable:
    """Hermes `<tool_call>{..}</tool_call>`, Granite `<|tool_call|>[..]`, Mistral v3 `[TOOL_CALLS] [..]`,
    FireFunction `functools[..]`, Command R7B `<|START_ACTION|>[..]<|END_ACTION|>`."""
    def parse(text: str) -> ParsedCalls:
        calls, spans, errors, pos = [], [], [], 0
        while (start := text.find(open_, pos)) >= 0:
            pos = start + len(open_)
            found = read_json(text, pos)
            if found is None:
                errors.append(f"{open_} is not followed by JSON: {text[pos:pos + 80]!r}")
                continue
            value, end = found
            parsed = [call_from_object(o, name_key=name_key, argument_keys=argument_keys, id_key=id_key)
                      for o in _objects(value)]
            bad = [why for call, why in parsed if call is None]
            if bad or not parsed:
                errors.extend(bad or [f"{open_} holds an empty list"])
                continue
            if close:
                rest = len(text[end:]) - len(text[end:].lstrip())
                end = end + rest + len(close) if text.startswith(close, end + rest) else end
            calls.extend(call for call, _ in parsed)
            spans.append((start, end))
            pos = end
        return _finish(fmt, text, calls, spans, errors)
    return parse


def hermes_render(calls: list[ToolCall]) -> str:
    return "\n".join(f'<tool_call>\n{{"name": "{c.name}", "arguments": {dumps(c.arguments)}}}\n</tool_call>'
                     for c in calls)


def json_list_renderer(prefix: str, suffix: str = "", *, name_key: str = "name",
                       argument_key: str = "arguments", with_id: bool = False) -> Callable:
    def render(calls: list[ToolCall]) -> str:
        items = []
        for i, c in enumerate(calls):
            item = {name_key: c.name, argument_key: c.arguments}
            if with_id:
                item["id"] = c.id or f"call{i:05d}"
            items.append(item)
        return prefix + dumps(items) + suffix
    return render


# --- Llama 3.x: the whole reply is the JSON call (optionally after <|python_tag|>) -------------------------

PYTHON_TAG = "<|python_tag|>"
_BUILTIN = regex.compile(r"([A-Za-z_][\w]*)\.call\((.*)\)\s*$", regex.S)
_BUILTIN_ARG = regex.compile(r'\s*([A-Za-z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def llama3_parse(text: str) -> ParsedCalls:
    """`{"name": ..., "parameters": {...}}` as the whole reply, several joined by ";", optionally after
    <|python_tag|>; a built-in tool as `<|python_tag|>brave_search.call(query="...")`. Text that does not start
    with `{` or the tag is content (vLLM's llama3_json reads only such replies)."""
    body = text.strip()
    tagged = body.startswith(PYTHON_TAG)
    body = body[len(PYTHON_TAG):].lstrip() if tagged else body
    if tagged and (builtin := _BUILTIN.match(body)):
        args = dict(_BUILTIN_ARG.findall(builtin.group(2)))
        return ParsedCalls("llama3_json", [ToolCall(builtin.group(1), args)], "", [])
    if not body.startswith("{"):
        errors = [f"{PYTHON_TAG} is not followed by a call: {body[:80]!r}"] if tagged else []
        return ParsedCalls("llama3_json", [], text.strip(), errors)
    calls, pos = [], 0
    while pos < len(body):
        found = read_json(body, pos)
        call, why = call_from_object(found[0]) if found else (None, f"not JSON: {body[pos:pos + 80]!r}")
        if call is None:
            return ParsedCalls("llama3_json", [], text.strip(), [why])
        calls.append(call)
        pos = found[1]
        while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
            pos += 1
    return ParsedCalls("llama3_json", calls, "", [])


def llama3_render(calls: list[ToolCall]) -> str:
    return "; ".join(f'{{"name": "{c.name}", "parameters": {dumps(c.arguments)}}}' for c in calls)


# --- Mistral v11+ (Small 3.2, Devstral, Magistral, Ministral 3): [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} -------

_V11_HEAD = regex.compile(r"\s*([^\[\]\s{}]+?)\s*(?:\[CALL_ID\]\s*([^\[\s]+)\s*)?\[ARGS\]")


def mistral_v11_parse(text: str) -> ParsedCalls:
    calls, spans, errors, pos = [], [], [], 0
    while (start := text.find("[TOOL_CALLS]", pos)) >= 0:
        pos = start + len("[TOOL_CALLS]")
        while head := _V11_HEAD.match(text, pos):       # several calls may follow one [TOOL_CALLS]
            found = read_json(text, head.end())
            call, why = ((ToolCall(head.group(1), found[0], head.group(2)), None)
                         if found and isinstance(found[0], dict) else (None, f"{head.group(1)}: [ARGS] is not "
                                                                             f"followed by a JSON object"))
            if call is None:
                errors.append(why)
                break
            calls.append(call)
            spans.append((start, found[1]))
            start = pos = found[1]
        else:
            if pos == start + len("[TOOL_CALLS]"):
                errors.append(f"[TOOL_CALLS] is not followed by name[ARGS]{{...}}: {text[pos:pos + 80]!r}")
    return _finish("mistral_v11", text, calls, spans, errors)


def mistral_v11_render(calls: list[ToolCall]) -> str:
    return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{dumps(c.arguments)}" for c in calls)


# --- <function=name>{json}</function> (Functionary v3.1) and Qwen3-Coder's XML parameters ---------------------

_FUNCTION = regex.compile(r"<function=([^>\s]+)>")
_PARAMETER = regex.compile(r"<parameter=([^>]+)>\n?(.*?)\n?</parameter>", regex.S)


def function_tag_parse(text: str) -> ParsedCalls:
    calls, spans, errors = [], [], []
    for head in _FUNCTION.finditer(text):
        found = read_json(text, head.end())
        call, why = call_from_object({"name": head.group(1), "arguments": found[0]}) if found else (
            None, f"<function={head.group(1)}> is not followed by JSON")
        if call is None:
            errors.append(why)
            continue
        end = found[1]
        end = end + len("</function>") if text.startswith("</function>", end) else end
        calls.append(call)
        spans.append((head.start(), end))
    return _finish("functionary_v3_1", text, calls, spans, errors)


def function_tag_render(calls: list[ToolCall]) -> str:
    return "".join(f"<function={c.name}>{dumps(c.arguments)}</function>" for c in calls)


def _parameter_value(raw: str):
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw          # strings are written bare


def qwen3_coder_parse(text: str) -> ParsedCalls:
    calls, spans, errors = [], [], []
    for block in regex.finditer(r"<tool_call>(.*?)(?:</tool_call>|$)", text, regex.S):
        function = regex.search(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", block.group(1), regex.S)
        if function is None:
            errors.append(f"<tool_call> holds no <function=...>: {block.group(1)[:80]!r}")
            continue
        args = {k.strip(): _parameter_value(v) for k, v in _PARAMETER.findall(function.group(2))}
        calls.append(ToolCall(function.group(1).strip(), args))
        spans.append(block.span())
    return _finish("qwen3_coder", text, calls, spans, errors)


def qwen3_coder_render(calls: list[ToolCall]) -> str:
    def value(v):
        return v if isinstance(v, str) else dumps(v)
    return "\n".join("<tool_call>\n<function=" + c.name + ">\n" + "".join(
        f"<parameter={k}>\n{value(v)}\n</parameter>\n" for k, v in c.arguments.items()) + "</function>\n</tool_call>"
        for c in calls)


# --- Functionary v3.2: >>>recipient\n content ------------------------------------------------------------------

_RECIPIENT = regex.compile(r">>>\s*([\w.\-]+)\n")


def functionary_v3_2_parse(text: str) -> ParsedCalls:
    """`>>>all\\n` text is content, `>>>name\\n{json}` a call. The generation prompt ends with ">>>": pass the
    generated text with that prefix (">>>" + text) so its first recipient is read."""
    calls, spans, errors = [], [], []
    for head in _RECIPIENT.finditer(text):
        if head.group(1) == "all":
            spans.append(head.span())               # the recipient line, not the message after it
            continue
        found = read_json(text, head.end())
        call, why = call_from_object({"name": head.group(1), "arguments": found[0]}) if found else (
            None, f">>>{head.group(1)} is not followed by JSON")
        if call is None:
            errors.append(why)
            continue
        calls.append(call)
        spans.append((head.start(), found[1]))
    return _finish("functionary_v3_2", text, calls, spans, errors)


def functionary_v3_2_render(calls: list[ToolCall]) -> str:
    return "".join(f">>>{c.name}\n{dumps(c.arguments)}" for c in calls)


# --- DeepSeek R1 (function<｜tool▁sep｜>name + ```json block) and V3.1 (name<｜tool▁sep｜>{json}) ---------------

DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def deepseek_parse(text: str) -> ParsedCalls:
    calls, spans, errors, pos = [], [], [], 0
    while (start := text.find(DS_CALL_BEGIN, pos)) >= 0:
        end = text.find(DS_CALL_END, start)
        end = len(text) if end < 0 else end
        head, sep, body = text[start + len(DS_CALL_BEGIN):end].partition(DS_SEP)
        pos = end + len(DS_CALL_END)
        if head.strip() == "function":          # R1: type, then name and a ```json block
            name, _, body = body.partition("\n")
            body = body.strip().removeprefix("```json").removesuffix("```")
        else:
            name = head
        found = read_json(body) if sep else None
        call, why = call_from_object({"name": name.strip(), "arguments": found[0]}) if found else (
            None, f"{DS_CALL_BEGIN} holds no name{DS_SEP}JSON: {text[start:start + 80]!r}")
        if call is None:
            errors.append(why)
            continue
        calls.append(call)
        spans.append((start, min(pos, len(text))))
    result = _finish("deepseek", text, calls, spans, errors)
    if calls:       # the section markers around the calls are not content either
        result.content = result.content.replace(DS_CALLS_BEGIN, "").replace(DS_CALLS_END, "").strip()
    return result


def deepseek_r1_render(calls: list[ToolCall]) -> str:
    return DS_CALLS_BEGIN + "\n".join(f"{DS_CALL_BEGIN}function{DS_SEP}{c.name}\n```json\n{dumps(c.arguments)}\n```"
                                      f"{DS_CALL_END}" for c in calls) + DS_CALLS_END


def deepseek_v3_1_render(calls: list[ToolCall]) -> str:
    return DS_CALLS_BEGIN + "".join(f"{DS_CALL_BEGIN}{c.name}{DS_SEP}{dumps(c.arguments)}{DS_CALL_END}"
                                    for c in calls) + DS_CALLS_END
