"""What a tool call is once parsed out of generated text, and the JSON reading every format's parser shares.

A call is a name and its arguments as a JSON object (a dict), the shape OpenAI's `tool_calls[].function` carries
once its `arguments` string is decoded. Parsing never raises: a region that looks like a call (its marker is
there) but does not read as one is an error string, and it stays in the content, as a server leaves it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCall:
    """One function call, the project's one class for it. Parsed out of generated text, `arguments` is the decoded
    JSON object; as a server sent it (the endpoint probes), it is the raw `arguments` value exactly as received
    (normally the OpenAI JSON string; a value that is not one stays visible to be reported). `name` is None
    only where a server sent a call without one."""
    name: str | None
    arguments: object
    id: str | None = None

    def decoded(self) -> tuple[dict | None, str | None]:
        """(the arguments object, None) or (None, why they are not one): see decode_arguments."""
        return decode_arguments(self.arguments)

    def as_message_call(self, call_id: str | None = None) -> dict:
        """The entry of an assistant message's `tool_calls` as chat templates read it (transformers, vLLM and
        llama.cpp hand templates the arguments as an object, not the OpenAI JSON string)."""
        arguments, _ = self.decoded()
        return {"id": call_id or self.id or "call00001", "type": "function",
                "function": {"name": self.name, "arguments": dict(arguments or {})}}

    def as_openai(self, call_id: str | None = None) -> dict:
        """The entry of an OpenAI response's `tool_calls` (arguments as a JSON string)."""
        arguments = self.arguments if isinstance(self.arguments, str) else \
            json.dumps(self.arguments, ensure_ascii=False)
        return {"id": call_id or self.id or "call00001", "type": "function",
                "function": {"name": self.name, "arguments": arguments}}

    @classmethod
    def from_openai(cls, entry: dict) -> ToolCall:
        """An OpenAI `tool_calls[]` entry (arguments a JSON string or already an object); ValueError when the
        name is missing or the arguments are not one JSON object."""
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"not a function call: {str(entry)[:120]}")
        arguments, error = decode_arguments(function.get("arguments", {}))
        if error:
            raise ValueError(error)
        return cls(function["name"], arguments, entry.get("id"))


@dataclass
class ParsedCalls:
    """Calls read out of one generated text by one format's parser.

    `content` is the text outside the calls that parsed (what a server returns as `content`), `errors` one line
    per region that carried the format's marker but did not read as a call (it stays in `content`)."""
    format: str
    calls: list[ToolCall] = field(default_factory=list)
    content: str = ""
    errors: list[str] = field(default_factory=list)


def decode_arguments(value) -> tuple[dict | None, str | None]:
    """(the arguments object, None) or (None, why not): a dict is taken as is, a string must hold one JSON
    object; a string holding a JSON string that holds an object is reported as double-encoded."""
    if isinstance(value, dict):
        return value, None
    if not isinstance(value, str):
        return None, f"arguments are a {type(value).__name__}, not a JSON object"
    try:
        decoded = json.loads(value) if value.strip() else {}
    except json.JSONDecodeError as e:
        return None, f"arguments are not JSON ({e.msg} at {e.pos}): {value[:80]!r}"
    if isinstance(decoded, str):
        inner, _ = decode_arguments(decoded)
        if inner is not None:
            return None, f"arguments are double-encoded (a JSON string holding the object): {value[:80]!r}"
    if not isinstance(decoded, dict):
        return None, f"arguments are a JSON {type(decoded).__name__}, not an object: {value[:80]!r}"
    return decoded, None


def read_json(text: str, start: int = 0) -> tuple[object, int] | None:
    """The JSON value starting at text[start] (leading whitespace skipped) and the index after it, or None.
    Uses the real decoder, so braces inside strings never confuse where a call ends."""
    i = start
    while i < len(text) and text[i].isspace():
        i += 1
    try:
        return json.JSONDecoder().raw_decode(text, i)
    except json.JSONDecodeError:
        return None


def call_from_object(obj, *, name_key: str = "name", argument_keys=("arguments", "parameters"),
                     id_key: str | None = "id") -> tuple[ToolCall | None, str | None]:
    """A call from a JSON object such as {"name": ..., "arguments": {...}}; (None, why) when it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get(name_key), str) or not obj[name_key]:
        return None, f"not a call object (no {name_key!r} string): {json.dumps(obj)[:80]}"
    key = next((k for k in argument_keys if k in obj), None)
    arguments = obj[key] if key else {}
    if not isinstance(arguments, dict):
        # in generated text the arguments are the object itself; a string holding it is double-encoded
        # (vLLM's parsers pass it on as a JSON string inside the OpenAI string)
        decoded, _ = decode_arguments(arguments) if isinstance(arguments, str) else (None, None)
        why = ("double-encoded: a JSON string holding the object" if decoded is not None else
               f"a JSON {type(arguments).__name__}, not an object")
        return None, f"{obj[name_key]}: arguments are {why}: {json.dumps(arguments)[:80]}"
    call_id = obj.get(id_key) if id_key else None
    return ToolCall(obj[name_key], arguments, call_id if isinstance(call_id, str) else None), None


def dumps(value) -> str:
    """JSON as templates write it with tojson (", " and ": " separators, no ASCII escaping)."""
    return json.dumps(value, ensure_ascii=False)
