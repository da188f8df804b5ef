"""A healthy OpenAI-compatible chat server in one function, for the chain checks' fast tests.

It answers like a server with a Hermes tool parser, a reasoning parser and structured output: a tool request gets
get_weather(Tokyo) (or the named function), a reasoning question gets `reasoning_content` and a short answer,
a `response_format` request gets JSON that validates, anything else one fixed greedy sentence with per-token
logprobs (the runner-up 2.9 nats behind). usage.prompt_tokens is the reference's count of the same prompt, so
nothing is cut. Streams are split the way servers split them: role, then one delta per token or per argument
fragment, finish, usage.
"""
from __future__ import annotations

import json

ANSWER = [" The", " sea", " is", " vast", ",", " deep", " and", " full", " of", " life", ".", " Its", " waves", " roll",
          " in", " from", " far", " away", ",", " and", " the", " wind", " carries", " salt", " and", " the", " cries",
          " of", " gulls", " over", " the", " water", " all", " day", " long", "."]     # past chain_faults.LATE_TOKEN
CALL_ARGUMENTS = {"city": "Tokyo", "unit": "celsius"}
REASONING = "17 + 25: first 17 + 20 = 37, then 37 + 5 = 42. So the sum of the two numbers is 42."


def logprob(token: str) -> dict:
    """One position's logprobs as servers send them: the pick and its alternatives, the runner-up far behind."""
    return {"token": token, "logprob": -0.1, "top_logprobs": [{"token": token, "logprob": -0.1},
                                                              {"token": " zulu", "logprob": -3.0}]}


def thinking_off(body: dict) -> bool:
    return (body.get("chat_template_kwargs") or {}).get("enable_thinking") is False


class HealthyServer:
    def __init__(self, reference):
        self.ref = reference
        self.requests: list[tuple[str, dict | None]] = []

    def __call__(self, method: str, path: str, body: dict | None):
        self.requests.append((path, body))
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "fake", "object": "model"}]}
        if path != "/v1/chat/completions":
            return 404, {"error": {"message": "not found"}}
        message, finish, tokens = self.message(body)
        generated = (message.get("reasoning_content") or "") + (message.get("content") or "")
        usage = {"prompt_tokens": self.count(body),
                 "completion_tokens": len(self.ref.tokenizer.encode(generated, add_special_tokens=False)) or 8}
        if body.get("stream"):
            return 200, self.events(message, finish, tokens, usage)
        choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        if tokens:
            choice["logprobs"] = {"content": [logprob(t) for t in tokens]}
        return 200, {"choices": [choice], "usage": usage}

    def count(self, body: dict) -> int:
        messages = [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.loads(
            c["function"]["arguments"])}} for c in m["tool_calls"]]} if m.get("tool_calls") else m
                    for m in body["messages"]]
        extra = {"tools": body["tools"]} if body.get("tools") else {}
        text = self.ref.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **extra)
        return len(self.ref.tokenizer.encode(text, add_special_tokens=False))

    def message(self, body: dict) -> tuple[dict, str, list[str]]:
        if body.get("tools") and body.get("tool_choice") != "none":
            choice = body.get("tool_choice")
            offered = [t["function"]["name"] for t in body["tools"]]
            name = choice["function"]["name"] if isinstance(choice, dict) else offered[0]
            arguments = {"get_weather": CALL_ARGUMENTS, "get_server_time": {}}.get(name, {"city": "Tokyo"})
            call = {"id": "call_9", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            return {"content": None, "tool_calls": [call]}, "tool_calls", []
        if body.get("response_format"):
            return {"content": json.dumps({"capital": "Paris", "country": "France"})}, "stop", []
        if "step by step" in body["messages"][-1]["content"] and thinking_off(body):
            return {"content": "The answer is 42."}, "stop", []
        if "step by step" in body["messages"][-1]["content"]:
            return {"content": "The answer is 42.", "reasoning_content": REASONING}, "stop", []
        return {"content": "".join(ANSWER)}, "length", list(ANSWER)

    def events(self, message: dict, finish: str, tokens: list[str], usage: dict) -> list[dict]:
        def event(delta=None, finish_reason=None, **extra):
            return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason, **extra}]}
        out = [event({"role": "assistant"})]
        for call in message.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            out.append(event({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                              "function": {"name": call["function"]["name"], "arguments": ""}}]}))
            for i in range(0, len(arguments), 7):
                out.append(event({"tool_calls": [{"index": 0, "function": {"arguments": arguments[i:i + 7]}}]}))
        if message.get("reasoning_content"):
            out.append(event({"reasoning_content": message["reasoning_content"]}))
        for t in tokens:
            out.append(event({"content": t}, logprobs={"content": [logprob(t)]}))
        if message.get("content") and not tokens:
            out.append(event({"content": message["content"]}))
        out.append(event(finish_reason=finish))
        out.append({"choices": [], "usage": usage})
        return out
