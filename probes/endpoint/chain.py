"""The serving chain as the client sees it: one chat request with its OpenAI extras (tools, tool_choice,
response_format, logprobs), streamed or not, and the answer as the parsers behind the server left it.

`ChainAnswer` keeps what the chain checks judge: the content, the reasoning the server split off
(`reasoning_content`, `reasoning`), the structured tool calls (name and the raw `arguments` string exactly as sent:
a call whose arguments are not JSON must stay visible), finish_reason and usage. `assemble(events)` folds a
stream's deltas into the same shape (tool calls by their `index`, argument fragments concatenated), so a streamed
answer compares with the non-streamed one field by field. `served_prompt` asks a server that can say what prompt
it built for a request (llama.cpp `POST /apply-template` takes the chat body, tools included; vLLM `POST /tokenize`
with messages and tools), None where it cannot.
"""
from __future__ import annotations

from dataclasses import dataclass

from probes.endpoint.client import EndpointError
from probes.endpoint.types import TokenLogprob
from reference_engine.generate.tool_call_types import ToolCall   # the one call class; `arguments` as sent

ROUTE = "/v1/chat/completions"
REASONING_KEYS = ("reasoning_content", "reasoning")   # llama.cpp / vLLM / DeepSeek; OpenRouter, newer vLLM


@dataclass
class ChainAnswer:
    content: str
    reasoning: str | None          # None: the server sent no reasoning field at all
    tool_calls: list[ToolCall]
    finish_reason: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokens: list[TokenLogprob] | None = None
    streamed: bool = False

    def summary(self) -> dict:
        """The answer as evidence: short, JSON-ready."""
        return {"content": self.content[:400], "reasoning_content": None if self.reasoning is None
                else self.reasoning[:300], "tool_calls": [{"name": c.name, "arguments": c.arguments if
                                                           isinstance(c.arguments, str) else repr(c.arguments)}
                                                          for c in self.tool_calls],
                "finish_reason": self.finish_reason, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "streamed": self.streamed}


def _reasoning(message: dict) -> str | None:
    for key in REASONING_KEYS:
        if key in message:
            value = message.get(key)
            return value if isinstance(value, str) else ""
    return None


def _calls(raw) -> list[ToolCall]:
    calls = []
    for item in raw if isinstance(raw, list) else []:
        function = item.get("function") if isinstance(item, dict) else None
        if isinstance(function, dict):
            calls.append(ToolCall(function.get("name"), function.get("arguments"), item.get("id")))
    return calls


def _logprobs(choice: dict) -> list[TokenLogprob] | None:
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list):
        return None
    return [TokenLogprob(str(t.get("token", "")), t.get("logprob"), _top(t.get("top_logprobs")))
            for t in content if isinstance(t, dict)]


def _top(entries) -> dict[str, float]:
    """top_logprobs as piece text -> logprob (the server's own alternatives at one position)."""
    return {str(e.get("token", "")): float(e["logprob"]) for e in entries or []
            if isinstance(e, dict) and isinstance(e.get("logprob"), (int, float))}


def parse_answer(body) -> ChainAnswer:
    """A non-streamed chat answer; ValueError when it has no choice."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError(f"no choices in the answer: {str(body)[:200]}")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    content = message.get("content")
    return ChainAnswer(content if isinstance(content, str) else "", _reasoning(message),
                       _calls(message.get("tool_calls")), choice.get("finish_reason"), usage.get("prompt_tokens"),
                       usage.get("completion_tokens"), _logprobs(choice))


def assemble(events: list[dict]) -> ChainAnswer:
    """A stream's deltas folded into one answer: text concatenated, tool calls gathered by index (the first
    fragment of a call carries its id and name, the rest append to its arguments)."""
    content, reasoning, finish, usage, tokens = [], None, None, {}, []
    calls: dict[int, dict] = {}
    for event in events:
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        if isinstance(delta.get("content"), str):
            content.append(delta["content"])
        piece = _reasoning(delta)
        if piece is not None:
            reasoning = (reasoning or "") + piece
        for n, item in enumerate(delta.get("tool_calls") or []):
            if not isinstance(item, dict):
                continue
            slot = calls.setdefault(int(item.get("index", n)), {"id": None, "name": None, "arguments": ""})
            slot["id"] = slot["id"] or item.get("id")
            function = item.get("function") if isinstance(item.get("function"), dict) else {}
            slot["name"] = slot["name"] or function.get("name")
            if isinstance(function.get("arguments"), str):
                slot["arguments"] += function["arguments"]
        tokens.extend(_logprobs(choice) or [])
        finish = choice.get("finish_reason") or finish
    return ChainAnswer("".join(content), reasoning,
                       [ToolCall(c["name"], c["arguments"], c["id"]) for _, c in sorted(calls.items())],
                       finish, usage.get("prompt_tokens"), usage.get("completion_tokens"), tokens or None,
                       streamed=True)


def chat(surface, request: dict, *, stream: bool = False, greedy: bool = True) -> ChainAnswer:
    """One chat request: `request` holds messages and any extras; the model name, temperature 0 and the server's
    plain-greedy switches are added (greedy=False keeps the server's own defaults but temperature 0)."""
    body = {"temperature": 0.0, **(surface.greedy_extra() if greedy else {}), **request, "stream": stream}
    if surface.model:
        body["model"] = surface.model
    if not stream:
        return parse_answer(surface.client.post(ROUTE, body))
    body["stream_options"] = {"include_usage": True}
    events = surface.client.stream(ROUTE, body)
    errors = [e["error"] for e in events if e.get("error")]
    if errors:
        raise EndpointError(f"POST {ROUTE} (stream): error event: {str(errors[0])[:200]}", route=ROUTE)
    return assemble(events)


def served_prompt(surface, request: dict) -> str | None:
    """The prompt text the server builds for a chat request, where it says (None: no such route)."""
    if surface.kind == "llama.cpp":
        body = surface.client.post("/apply-template", request)
        return body.get("prompt") if isinstance(body, dict) else None
    if surface.kind == "vllm":
        extra = {"model": surface.model} if surface.model else {}
        fields = {k: request[k] for k in ("messages", "tools") if k in request}
        ids = surface.client.post("/tokenize", {**extra, **fields, "add_generation_prompt": True})
        text = surface.client.post("/detokenize", {**extra, "tokens": ids.get("tokens", [])})
        return text.get("prompt") if isinstance(text, dict) else None
    return None


def template_caps(surface) -> dict | None:
    """What llama.cpp says its chat template can do (`/props` chat_template_caps: supports_tools, ...)."""
    caps = surface.info.get("chat_template_caps") if surface.kind == "llama.cpp" else None
    return caps if isinstance(caps, dict) else None
