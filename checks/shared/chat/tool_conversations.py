"""The tool-use conversation that exercises a chat template's tool branches, and rendering it leniently.

One tool (a weather lookup, the example every family's docs use; the endpoint probes send the same one, with a
strict schema so a server's constrained decoding and a client's validation both bite), a user question, the
assistant's call, the tool's result. The static checks (TOK030-TOK033) render it with the model's template; the
endpoint probes can send the same one-shot conversation to a server (a small model calls a tool reliably only
after seeing a call).
Templates disagree on the shape of an assistant tool-call message, so `render_tool_turns` tries the variants
servers send (arguments as an object or as the OpenAI JSON string; content None or "") and says which rendered.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from reference_engine.generate.tool_calls import ToolCall

WEATHER_TOOL = {"type": "function", "function": {       # the project's one weather tool (static and live probes)
    "name": "get_weather",
    "description": "Get the current weather in a given city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "The city name, e.g. Paris"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TOOLS = [WEATHER_TOOL]
# ids are 9 alphanumerics: Mistral's templates refuse any other length
CALL = ToolCall("get_weather", {"city": "Paris", "unit": "celsius"}, id="call0abcd")
SECOND_CALL = ToolCall("get_weather", {"city": "Lyon", "unit": "celsius"}, id="call1abcd")
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
RESULT = {"temperature": 22, "unit": "celsius", "sky": "sunny"}

# (arguments as, assistant content): transformers' convention first, then what OpenAI clients send
VARIANTS = (("object", None), ("object", ""), ("json string", None), ("json string", ""))


def assistant_turn(calls: list[ToolCall], arguments: str = "object", content=None) -> dict:
    entries = [c.as_message_call() if arguments == "object" else c.as_openai() for c in calls]
    return {"role": "assistant", "content": content, "tool_calls": entries}


def tool_turns(calls: list[ToolCall]) -> list[dict]:
    return [{"role": "tool", "tool_call_id": c.id, "name": c.name, "content": json.dumps(RESULT)} for c in calls]


def conversation(calls: list[ToolCall], arguments: str = "object", content=None, *, results: bool = True) -> list:
    """ASK, the assistant's calls and (with results) one tool message per call."""
    return [*ASK, assistant_turn(calls, arguments, content), *(tool_turns(calls) if results else [])]


def one_shot(arguments: str = "object", content=None) -> list[dict]:
    """A conversation that shows one complete call (question, call, result, answer) and asks again: a small model
    calls a tool reliably only after seeing a call; the expected next call is get_weather(city="Lyon")."""
    return [*conversation([CALL], arguments, content),
            {"role": "assistant", "content": "It is sunny and 22 degrees Celsius in Paris."},
            {"role": "user", "content": "And what is the weather like in Lyon?"}]


ONE_SHOT_EXPECTED = ToolCall("get_weather", {"city": "Lyon"})


@dataclass
class Rendered:
    text: str | None            # None: no variant rendered
    variant: tuple | None       # the (arguments, content) that rendered
    error: str | None           # the first variant's error when none rendered


def render_tool_turns(tokenizer, calls: list[ToolCall], *, results: bool = True, tools=TOOLS) -> Rendered:
    """The conversation rendered without a generation prompt under the first variant the template accepts."""
    first_error = None
    for arguments, content in VARIANTS:
        try:
            text = tokenizer.apply_chat_template(conversation(calls, arguments, content, results=results),
                                                 add_generation_prompt=False, tokenize=False, tools=tools)
            return Rendered(text, (arguments, content), None)
        except Exception as e:      # the sandbox's and the template's own errors alike
            first_error = first_error or getattr(e, "problem", None) or f"{type(e).__name__}: {e}"
    return Rendered(None, None, first_error)
