"""Judging tool calls as a client receives them: the name is one of the tools, `arguments` is one JSON object sent
as a string (not double-encoded) that validates against the tool's JSON schema, and `finish_reason` says
"tool_calls". And the raw-text case: no structured call, but the content holds one the model's own format
parser reads (reference_engine/generate/tool_calls.py, the project's one table of formats): only the format the
model's own template renders, never another family's.
"""
from __future__ import annotations

import json

import jsonschema

from checks.endpoint.chain import scenarios
from probes.endpoint.chain import ChainAnswer, ToolCall
from reference_engine.generate import harmony
from reference_engine.generate import tool_calls as formats


def call_problems(call: ToolCall) -> list[str]:
    """What is wrong with one structured call, one line each ([] when it is a valid call of a known tool). The
    lines about what the arguments say (schema_problems) are the model's words wherever the server does not
    enforce the schema; the others are the server's or its parser's."""
    schema = scenarios.tool_schema(call.name)
    if schema is None:
        return [f"the call names {call.name!r}, which is not one of the tools "
                f"{[t['function']['name'] for t in scenarios.TOOLS]}"]
    problems = []
    if not isinstance(call.arguments, str):
        problems.append(f"{call.name}: arguments sent as a JSON {type(call.arguments).__name__}, not the string "
                        f"the OpenAI schema defines")
    arguments, error = formats.decode_arguments(call.arguments)
    if error:
        return problems + [f"{call.name}: {error}"]
    return problems + schema_problems(call)


def schema_problems(call: ToolCall) -> list[str]:
    """The arguments are one JSON value but not what the tool's schema allows (another type, a missing key, a
    value outside an enum): what only a schema-constrained decoder rules out."""
    schema = scenarios.tool_schema(call.name)
    if schema is None or not isinstance(call.arguments, str):
        return []
    arguments, error = formats.decode_arguments(call.arguments)
    if error:
        try:
            value = json.loads(call.arguments)
        except json.JSONDecodeError:
            return []                           # not JSON at all: the parser cut it
        if isinstance(value, str) and formats.decode_arguments(value)[0] is not None:
            return []                           # double-encoded: the server's encoding, not the model's words
        return [f"{call.name}: {error}"]
    if arguments == {} and schema.get("required"):     # a parser that lost the arguments sends just this
        return [f"{call.name}: arguments \"{{}}\" although the tool requires {schema['required']}: the parser lost "
                f"the arguments the model wrote, or the model wrote none"]
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    return [f"{call.name}: arguments {arguments} break the tool's schema: {e.message}" for e in errors[:3]]


def decoded(call: ToolCall):
    """The arguments object (or the raw value when it is not one), for comparing two answers."""
    arguments, error = formats.decode_arguments(call.arguments)
    return call.arguments if error else arguments


GENERIC_MARKERS = ("{",)      # a marker plain prose or a plain JSON answer holds too: no call by itself


def raw_calls(text: str, template: str | None):
    """A call the model wrote as text in its own template's format (ParsedCalls), or None.

    Only the format the model's template renders counts: a healthy model that answers a tool request in plain
    text (a bare JSON object, a line starting `>>>`) wrote no call, whatever another family's parser reads in
    it. A region that fails to parse counts only where a marker of the format's own is there (not a bare `{`)
    or the region names a function."""
    own = formats.recognise(template)
    found = formats.find_calls(text, [own]) if own else None
    if found is None or found.calls:
        return found
    marked = any(m in text for m in own.call_markers if m not in GENERIC_MARKERS)
    named = any(not e.startswith("not a call object") for e in found.errors)
    return found if marked or named else None


def markup_left(text: str, template: str | None) -> list[str]:
    """The format's own control markup a client's content must not hold (harmony's channels: an analysis
    message or a call left in content with its headers); [] for formats whose markers are the call's own."""
    own = formats.recognise(template)
    return harmony.has_markup(text) if own is not None and own.name == "harmony" else []


def empty_calls_problem(answer: ChainAnswer) -> str | None:
    """finish_reason "tool_calls" on an answer whose tool_calls list is empty: the client is told to run calls
    it never gets."""
    if answer.finish_reason == "tool_calls" and not answer.tool_calls:
        return (f"finish_reason is 'tool_calls' but the tool_calls list is empty (content "
                f"{answer.content.strip()[:80]!r}): the server's parser lost the call it saw")
    return None


def finish_problem(answer: ChainAnswer) -> str | None:
    if answer.tool_calls and answer.finish_reason != "tool_calls":
        return (f"the answer carries {len(answer.tool_calls)} tool call(s) but finish_reason is "
                f"{answer.finish_reason!r}, not 'tool_calls' (clients that branch on it treat the call as text)")
    return None
