"""A fake OpenAI-compatible server behind an httpx transport, for `diff URL_A URL_B` without processes: every
answer is built from a few settings, so a test changes one thing on one side and sees that finding."""
from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field

import httpx

from tests.load_servers import _Base, _Handler

WORDS = (" alpha", " bravo", " charlie", " delta", " echo", " foxtrot", " golf", " hotel")


@dataclass
class FakeServer:
    """Greedy answers walk WORDS; at each step the pick has probability `p_pick`, the runner-up `p_next`.
    `flip_at`: the step where this server picks the runner-up instead (None: never)."""
    p_pick: float = 0.6
    p_next: float = 0.3
    flip_at: int | None = None
    extra_prompt_tokens: int = 0           # added to every usage.prompt_tokens (a second BOS, another template)
    logprobs: bool = True
    refuse_format: bool = False
    call_arguments: dict | None = field(default_factory=lambda: {"city": "Paris", "unit": "celsius"})
    models_status: int = 200
    models_html: bool = False              # /v1/models answers 200 with a web page (not an API server)
    seen: list[str] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen.append(path)
        if request.method == "GET" and path == "/v1/models":
            if self.models_status != 200 or self.models_html:
                return httpx.Response(self.models_status, text="<html>a web page</html>")
            return httpx.Response(200, json={"object": "list", "data": [{"id": "fake-model"}]})
        body = json.loads(request.content) if request.content else {}
        if path == "/v1/chat/completions":
            return self.chat(body)
        if path == "/v1/completions":
            count = len(str(body.get("prompt", "")).split()) + 1 + self.extra_prompt_tokens
            return httpx.Response(200, json={"choices": [{"text": " x", "finish_reason": "length"}],
                                             "usage": {"prompt_tokens": count, "completion_tokens": 1}})
        return httpx.Response(404, json={"error": {"message": f"no route {path}"}})

    def chat(self, body: dict) -> httpx.Response:
        prompt = str(body["messages"][-1]["content"])
        usage = {"prompt_tokens": len(prompt.split()) + 5 + self.extra_prompt_tokens, "completion_tokens": 0}
        if "response_format" in body:
            if self.refuse_format:
                return httpx.Response(400, json={"error": {"message": "response_format json_schema not supported"}})
            return self.message({"content": json.dumps({"capital": "Paris", "country": "France"})}, usage)
        if "tools" in body:
            if self.call_arguments is None:
                return self.message({"content": "It is sunny."}, usage)
            call = {"id": "call0abcd", "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps(self.call_arguments)}}
            return self.message({"content": None, "tool_calls": [call]}, usage, "tool_calls")
        tokens = [self.step(i) for i in range(min(int(body.get("max_tokens", 8)), len(WORDS) - 1))]
        choice_logprobs = {"content": tokens} if self.logprobs and body.get("logprobs") else None
        return self.message({"content": "".join(t["token"] for t in tokens)}, usage, "length", choice_logprobs)

    def step(self, i: int) -> dict:
        pick, other = (WORDS[i + 1], WORDS[i]) if self.flip_at == i else (WORDS[i], WORDS[i + 1])
        lp_pick, lp_other = math.log(self.p_pick), math.log(self.p_next)
        top = [{"token": pick, "logprob": lp_pick}, {"token": other, "logprob": lp_other},
               {"token": " zulu", "logprob": math.log(0.01)}]
        return {"token": pick, "logprob": lp_pick, "top_logprobs": top}

    @staticmethod
    def message(message: dict, usage: dict, finish: str = "stop", logprobs=None) -> httpx.Response:
        usage = {**usage, "completion_tokens": 3}
        choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        if logprobs is not None:
            choice["logprobs"] = logprobs
        return httpx.Response(200, json={"choices": [choice], "usage": usage})


class HttpFake(_Base):
    """A FakeServer behind a real HTTP port (127.0.0.1), for the CLI: `with HttpFake(FakeServer()) as s: s.url`."""

    def __init__(self, fake: FakeServer):
        self.fake = fake
        self.stopping = threading.Event()
        self.handler = _FakeHandler


class _FakeHandler(_Handler):
    def do_GET(self):
        self._answer("GET", b"")

    def do_POST(self):
        self._answer("POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _answer(self, method: str, content: bytes):
        response = self.owner.fake.handle(httpx.Request(method, f"http://fake{self.path}", content=content))
        self.send_response(response.status_code)
        self.send_header("Content-Type", response.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)
