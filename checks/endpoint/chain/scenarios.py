"""What the chain probes send: two tools with strict JSON schemas, a one-shot conversation that shows one earlier
call (a small healthy model makes a real call only after seeing one), a structured-output schema, a reasoning
question, and the prompts of the parity probes.

The server gets the call's `arguments` as a JSON string (the OpenAI schema); the reference template gets them as
an object (what transformers' templates read, and what llama.cpp hands its templates after parsing the string).
"""
from __future__ import annotations

import json

from checks.shared.chat.tool_conversations import WEATHER_TOOL

WEATHER = WEATHER_TOOL        # the one weather tool (checks/shared/chat/tool_conversations.py)
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                   "required": ["city"], "additionalProperties": False}}}
TOOLS = [WEATHER, CLOCK]
DESCRIPTION = WEATHER["function"]["description"]      # only the tool definitions contain it
SHOWN_CALL = {"city": "Paris", "unit": "celsius"}
NAMED = "get_time"       # the named tool_choice: not the one the conversation asks for, so honouring it shows


def one_shot(arguments_as_text: bool = True, call_id: str = "call_1") -> list[dict]:
    """A conversation with one earlier call, then the same kind of question. No tool result follows the earlier
    call: with a result and an answer in between, SmolLM2-135M answers the new question with a made-up
    <tool_response> instead of a call; right after a call it calls again."""
    arguments = json.dumps(SHOWN_CALL) if arguments_as_text else dict(SHOWN_CALL)
    return [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "user", "content": "What is the weather in Tokyo?"}]


def tool_schema(name: str | None) -> dict | None:
    return next((t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name), None)


def tool_request(tool_choice=None, call_id: str = "call_1") -> dict:
    request = {"messages": one_shot(call_id=call_id), "tools": TOOLS, "max_tokens": 64}
    if tool_choice is not None:
        request["tool_choice"] = tool_choice
    return request


# a tool without parameters, shown called once (arguments "{}"), then asked for again (SmolLM2-135M calls it)
NO_ARGS_TOOL = {"type": "function", "function": {
    "name": "get_server_time", "description": "Get the server's current time.",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}
NO_ARGS_REQUEST = {"messages": [
    {"role": "user", "content": "What time is it on the server?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_server_time", "arguments": "{}"}}]},
    {"role": "user", "content": "And what time is it on the server now?"}], "tools": [NO_ARGS_TOOL], "max_tokens": 64}

# ids of an earlier call that are not OpenAI's `call_...`: Kimi K2's `functions.NAME:INDEX` and a bare counter
HISTORY_IDS = ("functions.get_weather:0", "call00003")

NAMED_CHOICE = {"type": "function", "function": {"name": NAMED}}

# structured output: a schema a small model can fill, strict (no extra keys)
ANSWER_SCHEMA = {"type": "object", "properties": {"capital": {"type": "string"}, "country": {"type": "string"}},
                 "required": ["capital", "country"], "additionalProperties": False}
STRUCTURED = {"messages": [{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
              "max_tokens": 64, "response_format": {"type": "json_schema", "json_schema": {
                  "name": "capital", "strict": True, "schema": ANSWER_SCHEMA}}}

REASONING = {"messages": [{"role": "user", "content": "What is 17 + 25? Think step by step, then answer."}],
             "max_tokens": 160}
THINKING_OFF = {**REASONING, "chat_template_kwargs": {"enable_thinking": False}}    # Qwen3's switch, as vLLM and
# llama-server take it from the request
THINK_MARKERS = (("<think>", "</think>"), ("<thinking>", "</thinking>"), ("<|channel|>analysis", "<|end|>"),
                 ("[THINK]", "[/THINK]"))

# parity: a greedy answer of a few dozen tokens (SmolLM2-135M Q4_1 on llama-server: 51, then its end of turn), and
# one long shared prefix with two different questions; answers run to their stop, at most PARITY_TOKENS
PARITY = [{"role": "user", "content": "Write two sentences about the sea."}]
PARITY_TOKENS = 128
FACTS = ("The lighthouse on the northern cape was built in 1852 and painted red and white.",
         "Its keeper kept a logbook of every ship that passed, with the weather and the hour.",
         "In winter the fog came in from the east and stayed for days.",
         "The village below had a bakery, a chapel, a school and a harbour for twelve boats.")


def shared_prefix(repeat: int) -> str:
    return " ".join(f"({i + 1}) {FACTS[i % len(FACTS)]}" for i in range(repeat))


def prefixed(prefix: str, question: str) -> list[dict]:
    return [{"role": "system", "content": "Answer from these notes.\n" + prefix},
            {"role": "user", "content": question}]


SUFFIXES = ("What colour is the lighthouse?", "When does the fog come in?")
