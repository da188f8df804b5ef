"""The serving-chain faults of issue 35, planted by rewriting requests and answers between the client and a server.

The same rewrites run in `ChainProxy` (a real HTTP proxy in front of llama-server, for the live tests) and in
`fault_transport` (an httpx transport around a fake upstream, for the fast tests). Each fault is one thing a
broken server or gateway does:

    raw-text-call     the call is left in `content` as the model wrote it (<tool_call>{..}</tool_call>), no tool_calls
    args-not-json     the arguments string is cut mid-object
    args-double       the arguments are JSON-encoded twice (a string holding the JSON string)
    args-schema       the arguments break the tool's schema (unit "kelvin", not in the enum)
    finish-stop       finish_reason "stop" on an answer that carries tool calls
    stream-args       streamed argument fragments repeated (the deltas no longer assemble into the call)
    tools-dropped     `tools` and `tool_choice` removed from the request (and from /apply-template)
    think-leak        the reasoning put back into content inside <think>...</think>, the field left empty
    reasoning-dropped the reasoning field emptied
    format-ignored    `response_format` removed from the request
    format-invalid    the structured answer loses a required key
    truncate          a long prompt cut to its last quarter (what Ollama does at num_ctx)
    stream-diverge    a streamed greedy answer's 4th text delta becomes " banana"
    cache-diverge     the answer to a request seen before (a prefix-cache hit) changed from token 4 on
"""
from __future__ import annotations

import json

import httpx

from tests.load_servers import _Base, _Handler

FAULTS = ("raw-text-call", "args-not-json", "args-double", "args-schema", "finish-stop", "stream-args",
          "tools-dropped", "think-leak", "reasoning-dropped", "format-ignored", "format-invalid", "truncate",
          "stream-diverge", "cache-diverge")
LONG_PROMPT_CHARS = 4000


def rewrite_request(fault: str | None, path: str, body: dict) -> dict:
    body = json.loads(json.dumps(body))
    if fault == "tools-dropped" and path in ("/v1/chat/completions", "/apply-template"):
        body.pop("tools", None)
        body.pop("tool_choice", None)
    elif fault == "format-ignored":
        body.pop("response_format", None)
    elif fault == "truncate":
        for message in body.get("messages") or []:
            text = message.get("content")
            if isinstance(text, str) and len(text) > LONG_PROMPT_CHARS:
                message["content"] = text[-len(text) // 4:]
    return body


def _call_args(call: dict, fault: str) -> str:
    arguments = call["function"]["arguments"]
    if fault == "args-not-json":
        return arguments[:max(len(arguments) // 2, 1)]
    if fault == "args-double":
        return json.dumps(arguments)
    value = json.loads(arguments)
    return json.dumps({**value, "unit": "kelvin"})


def request_key(body: dict) -> str:
    """Two requests are "the same" when they differ at most in their cache switch."""
    return json.dumps({k: v for k, v in body.items() if k != "cache_prompt"}, sort_keys=True)


def rewrite_answer(fault: str | None, request: dict, answer: dict, repeated: bool = False) -> dict:
    """A non-streamed chat answer as the faulty server returns it (`repeated`: the same request came before)."""
    choices = answer.get("choices") or []
    if not fault or not choices:
        return answer
    answer = json.loads(json.dumps(answer))
    choice = answer["choices"][0]
    message = choice.get("message") or {}
    calls = message.get("tool_calls") or []
    if fault == "raw-text-call" and calls:
        text = "".join(f'<tool_call>\n{{"name": "{c["function"]["name"]}", "arguments": '
                       f'{c["function"]["arguments"]}}}\n</tool_call>' for c in calls)
        message["content"], message["tool_calls"], choice["finish_reason"] = text, [], "stop"
    elif fault in ("args-not-json", "args-double", "args-schema") and calls:
        for call in calls:
            call["function"]["arguments"] = _call_args(call, fault)
    elif fault == "finish-stop" and calls:
        choice["finish_reason"] = "stop"
    elif fault == "think-leak" and message.get("reasoning_content"):
        message["content"] = f"<think>\n{message['reasoning_content']}\n</think>\n{message.get('content') or ''}"
        message["reasoning_content"] = ""
    elif fault == "reasoning-dropped" and "reasoning_content" in message:
        message["reasoning_content"] = ""
    elif fault == "format-invalid" and "response_format" in request:
        value = json.loads(message["content"])
        value.pop("country", None)
        message["content"] = json.dumps(value)
    elif fault == "cache-diverge" and repeated:
        tokens = (choice.get("logprobs") or {}).get("content") or []
        if len(tokens) > 4:
            banana = {"token": " banana", "logprob": -0.01, "bytes": list(b" banana"), "top_logprobs": []}
            choice["logprobs"]["content"] = tokens[:3] + [banana]
            message["content"] = "".join(t["token"] for t in tokens[:3]) + " banana"
    return answer


def rewrite_events(fault: str | None, events: list[dict]) -> list[dict]:
    """A stream's JSON events as the faulty server sends them."""
    if fault not in ("stream-args", "stream-diverge"):
        return events
    out, texts = [], 0
    for event in events:
        out.append(event)
        delta = ((event.get("choices") or [{}])[0] or {}).get("delta") or {}
        if fault == "stream-args":
            for call in delta.get("tool_calls") or []:
                fragment = (call.get("function") or {}).get("arguments")
                if fragment:
                    out.append(json.loads(json.dumps(event)))       # the same fragment twice
        if fault == "stream-diverge" and isinstance(delta.get("content"), str) and delta["content"]:
            texts += 1
            if texts == 4:
                delta["content"] = " banana"
                event["choices"][0]["logprobs"] = {"content": [{"token": " banana", "logprob": -0.01,
                                                                "top_logprobs": []}]}
    return out


def stream_bytes(events: list[dict]) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def read_events(raw: bytes) -> list[dict]:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            try:
                out.append(json.loads(line[5:]))
            except ValueError:
                continue
    return out


def fault_transport(fault: str | None, upstream) -> httpx.MockTransport:
    """An httpx transport: the request rewritten, `upstream(path, body) -> (status, JSON | list of events)`, the
    answer rewritten."""
    seen = set()

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        if body is not None:
            body = rewrite_request(fault, path, body)
        status, answer = upstream(request.method, path, body)
        if isinstance(answer, list):
            return httpx.Response(status, content=stream_bytes(rewrite_events(fault, answer)),
                                  headers={"content-type": "text/event-stream"})
        if status == 200 and path == "/v1/chat/completions":
            key = request_key(body)
            answer = rewrite_answer(fault, body, answer, key in seen)
            seen.add(key)
        return httpx.Response(status, json=answer)
    return httpx.MockTransport(handle)


class ChainProxy(_Base):
    """An HTTP proxy planting `fault` into every answer of a real server (None: a transparent proxy)."""

    def __init__(self, upstream: str, fault: str | None = None):
        import threading
        self.upstream, self.fault = upstream.rstrip("/"), fault
        self.http = httpx.Client(base_url=self.upstream, timeout=httpx.Timeout(300, connect=5), trust_env=False)
        self.stopping = threading.Event()
        self.seen: set[str] = set()
        self.handler = _ChainHandler

    def stop(self):
        super().stop()
        self.http.close()


class _ChainHandler(_Handler):
    def do_GET(self):
        r = self.owner.http.get(self.path)
        self.send_json(r.status_code, r.json() if r.content else {})

    def do_POST(self):
        owner = self.owner
        body = rewrite_request(owner.fault, self.path, self.body())
        try:
            if body.get("stream"):
                r = owner.http.post(self.path, json=body)
                if r.status_code != 200:
                    return self.send_json(r.status_code, r.json())
                self.start_stream()
                self.event(stream_bytes(rewrite_events(owner.fault, read_events(r.content))))
                return
            r = owner.http.post(self.path, json=body)
        except httpx.HTTPError as e:
            return self.send_json(502, {"error": {"message": str(e)}})
        answer = r.json()
        if r.status_code == 200 and self.path == "/v1/chat/completions":
            key = request_key(body)
            answer = rewrite_answer(owner.fault, body, answer, key in owner.seen)
            owner.seen.add(key)
        self.send_json(r.status_code, answer)
