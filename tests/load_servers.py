"""Servers for the load tests: a fault-injecting proxy in front of a real server, a small deterministic fake
OpenAI server (for the fast tests), and llama.cpp's C++ llama-server.

`FaultProxy(upstream, fault)` forwards everything to `upstream` (chunk by chunk for streams) and, only while
another request is in flight ("under load"), injects one fault no healthy server shows:
- "crosstalk": a chat answer is replaced by the answer of another chat request in flight at the same time;
- "corrupt": a chat answer's token 3 becomes " banana" (far outside the top-k), the rest cut;
- "near-tie": at the first position whose runner-up is within 0.5 nats, the runner-up is taken, the rest cut;
- "5xx": every second request gets 503;
- "drop": a stream is cut after two chunks and closed with `data: [DONE]`, no finish_reason;
- "stall": the request hangs (a timeout for the client);
- "cliff": each request waits 0.1 s x (requests in flight)^2 before it is forwarded (latency climbs,
  throughput falls);
- "preemption": GET /metrics answers vLLM-style text whose vllm:num_preemptions_total climbs with every request
  while vllm:kv_cache_usage_perc sits at 0.98 and vllm:num_requests_waiting grows.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.assets import AssetError, cache_root
from tests.endpoint_assets import ServerProcess, free_port

LLAMA_SERVER_VERSION = "0.3.36"
START_TIMEOUT_S = 180


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):  # a client that walked away is no test failure
        pass


class _Base:
    """A ThreadingHTTPServer on 127.0.0.1:free port, served from a thread; stop() shuts it down."""

    handler: type

    def start(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.httpd = _Server(("127.0.0.1", self.port), self.handler)
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    @property
    def owner(self):
        return self.server.owner

    def body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return {}

    def _plain(self, text: str):
        """A Prometheus text exposition (the /metrics answer)."""
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, obj, headers: dict | None = None):
        if getattr(self, "counted", False):
            self.done()
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, raw: bytes) -> bool:
        """Write one server-sent event; False when the client has gone (it cancelled)."""
        try:
            self.wfile.write(raw)
            self.wfile.flush()
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False


# ------------------------------------------------------------------------------------------------ fake server

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima")


def fake_tokens(text: str, n: int) -> list[str]:
    seed = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    return [" " + WORDS[(seed >> (4 * i)) % len(WORDS)] for i in range(n)]


class FakeServer(_Base):
    """A deterministic OpenAI-compatible server with `slots` batch slots: each token takes `token_s`, stretched
    by how many requests exceed the slots (so throughput saturates and latency climbs past them). /metrics in
    llama.cpp's names. Chat answers carry top logprobs with a runner-up 0.3 nats behind at every position."""

    def __init__(self, slots: int = 4, token_s: float = 0.004):
        self.slots, self.token_s = slots, token_s
        self.lock = threading.Lock()
        self.in_flight = 0
        self.stopping = threading.Event()
        self.handler = _FakeHandler

    def step(self):
        with self.lock:
            load = self.in_flight
        time.sleep(self.token_s * max(1.0, load / self.slots))


class _FakeHandler(_Handler):
    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        elif self.path == "/metrics":
            o = self.owner
            running, deferred = min(o.in_flight, o.slots), max(o.in_flight - o.slots, 0)
            text = (f"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing {running}\n"
                    f"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred {deferred}\n")
            self._plain(text)
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = self.body()
        o = self.owner
        with o.lock:
            o.in_flight += 1
        try:
            if self.path == "/v1/chat/completions" and body.get("stream"):
                self.stream(body)
            elif self.path == "/v1/chat/completions":
                self.chat(body)
            else:
                self.send_json(404, {"error": {"message": "not found"}})
        finally:
            with o.lock:
                o.in_flight -= 1

    def stream(self, body):
        tokens = fake_tokens(json.dumps(body.get("messages")), int(body.get("max_tokens", 16)))
        self.start_stream()
        self.event(b'data: {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": null}]}\n\n')
        for i, tok in enumerate(tokens):
            self.owner.step()
            last = i == len(tokens) - 1
            chunk = {"choices": [{"index": 0, "delta": {"content": tok}, "finish_reason": "length" if last else None}]}
            if not self.event(f"data: {json.dumps(chunk)}\n\n".encode()):
                return
        self.event(b"data: [DONE]\n\n")

    def chat(self, body):
        text = json.dumps(body.get("messages"))
        tokens = fake_tokens(text, int(body.get("max_tokens", 16)))
        for _ in tokens:
            self.owner.step()
        content = []
        for i, tok in enumerate(tokens):
            alt = " " + WORDS[(WORDS.index(tok.strip()) + 1) % len(WORDS)]
            top = [{"token": tok, "logprob": -0.5}, {"token": alt, "logprob": -0.8},
                   {"token": " zulu", "logprob": -4.0}]
            content.append({"token": tok, "logprob": -0.5, "top_logprobs": top})
        self.send_json(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(tokens)},
                                          "finish_reason": "length", "logprobs": {"content": content}}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": len(tokens)}})


# ------------------------------------------------------------------------------------------------ the proxy

class FaultProxy(_Base):
    def __init__(self, upstream: str, fault: str | None = None):
        self.upstream, self.fault = upstream.rstrip("/"), fault
        self.http = httpx.Client(base_url=self.upstream, timeout=httpx.Timeout(120, connect=5),
                                 limits=httpx.Limits(max_connections=64), trust_env=False)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.seen = 0
        self.chat_in_flight: dict[int, str] = {}     # request number -> prompt key
        self.chat_bodies: dict[str, bytes] = {}      # prompt key -> last answer body
        self.injected = 0
        self.stopping = threading.Event()
        self.handler = _ProxyHandler

    def stop(self):
        super().stop()
        self.http.close()


class _ProxyHandler(_Handler):
    def do_GET(self):
        o = self.owner
        if self.path == "/metrics" and o.fault == "preemption":
            with o.lock:
                seen, running = o.seen, o.in_flight
            text = (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} {running}\n"
                    f"# TYPE vllm:num_requests_waiting gauge\n"
                    f"vllm:num_requests_waiting{{model_name=\"m\"}} {seen}\n"
                    f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name=\"m\"}} 0.98\n"
                    f"# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total{{model_name=\"m\"}} {3 * seen}\n")
            return self._plain(text)
        try:
            r = o.http.get(self.path)
        except httpx.HTTPError as e:
            return self.send_json(502, {"error": {"message": str(e)}})
        self._relay(r.status_code, r.content, r.headers.get("content-type", "application/json"))

    def _relay(self, status: int, content: bytes, ctype: str):
        if getattr(self, "counted", False):
            self.done()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def do_POST(self):
        o = self.owner
        body = self.body()
        key = json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True)
        with o.lock:
            o.in_flight += 1
            o.seen += 1
            number, busy = o.seen, o.in_flight > 1
            if self.path == "/v1/chat/completions":
                o.chat_in_flight[number] = key
        self.number, self.counted = number, True
        try:
            self._post(body, key, number, busy)
        finally:
            self.done()

    def done(self):
        """The request leaves the in-flight count before its last bytes go out: the client may send its next
        request the moment it has them, and that one must not see this one as load."""
        if self.counted:
            o = self.owner
            with o.lock:
                o.in_flight -= 1
                o.chat_in_flight.pop(self.number, None)
            self.counted = False

    def _post(self, body, key, number, busy):
        o, fault = self.owner, self.owner.fault
        if busy and fault == "5xx" and number % 2 == 0:
            o.injected += 1
            return self.send_json(503, {"error": {"message": "injected: server overloaded"}})
        if busy and fault == "stall":
            o.injected += 1
            o.stopping.wait(60)
            return
        if fault == "cliff":
            with o.lock:
                n = o.in_flight
            time.sleep(0.1 * n * n)
        if body.get("stream"):
            return self._stream(body, busy and fault == "drop")
        try:
            r = o.http.post(self.path, json=body)
        except httpx.HTTPError as e:
            return self.send_json(502, {"error": {"message": str(e)}})
        content = r.content
        if r.status_code == 200 and self.path == "/v1/chat/completions":
            with o.lock:
                o.chat_bodies[key] = content
                others = [k for n, k in o.chat_in_flight.items() if k != key and k in o.chat_bodies]
            if busy and fault == "crosstalk" and others:
                o.injected += 1
                content = o.chat_bodies[others[0]]
            elif busy and fault in ("corrupt", "near-tie"):
                content = self._rewrite(content, fault)
        self._relay(r.status_code, content, r.headers.get("content-type", "application/json"))

    def _rewrite(self, content: bytes, fault: str) -> bytes:
        answer = json.loads(content)
        choice = answer["choices"][0]
        tokens = (choice.get("logprobs") or {}).get("content") or []
        if fault == "corrupt" and len(tokens) > 3:
            banana = {"token": " banana", "logprob": -0.01}
            at, new = 3, {**banana, "top_logprobs": [banana]}
        else:
            at = next((i for i, t in enumerate(tokens) if len(t.get("top_logprobs") or []) > 1
                       and t["top_logprobs"][0]["logprob"] - t["top_logprobs"][1]["logprob"] < 0.5), None)
            if at is None:
                return content
            top = tokens[at]["top_logprobs"]
            new = {"token": top[1]["token"], "logprob": top[1]["logprob"], "top_logprobs": top}
        self.owner.injected += 1
        kept = tokens[:at] + [new]
        choice["logprobs"]["content"] = kept
        choice["message"]["content"] = "".join(t["token"] for t in kept)
        return json.dumps(answer).encode()

    def _stream(self, body, drop: bool):
        o = self.owner
        try:
            with o.http.stream("POST", self.path, json=body) as r:
                if r.status_code != 200:
                    r.read()
                    return self._relay(r.status_code, r.content, r.headers.get("content-type", "application/json"))
                self.start_stream()
                chunks = 0
                for line in r.iter_lines():
                    if drop and line.startswith("data:") and chunks >= 2:
                        o.injected += 1
                        self.done()
                        self.event(b"data: [DONE]\n\n")
                        return
                    if line.startswith("data:") and ('"finish_reason": "' in line or '"finish_reason":"' in line
                                                     or line.strip() == "data: [DONE]"):
                        self.done()
                    if not self.event((line + "\n").encode()):
                        return
                    chunks += line.startswith("data:")
        except (httpx.HTTPError, OSError):
            return


# ------------------------------------------------------------------------------------------------ llama-server

def llama_server_binary() -> Path:
    """The llama-server built by scripts/llama_cpp.sh (scripts/setup.sh --test), beside the shared libraries it
    links (an $ORIGIN rpath)."""
    path = cache_root() / "bin" / f"llama.cpp-{LLAMA_SERVER_VERSION}" / "llama-server"
    if not path.exists():
        raise AssetError(f"{path} is missing: run scripts/llama_cpp.sh (scripts/setup.sh --test builds it once)")
    return path


class LlamaCppServer(ServerProcess):
    """llama.cpp's C++ llama-server on 127.0.0.1 (--parallel slots, --metrics, one thread)."""
    name = "llama-server"

    def __init__(self, gguf: Path, *args: str, parallel: int = 4, ctx: int = 4096):
        super().__init__(gguf, *args)
        self.parallel, self.ctx = parallel, ctx

    def start(self) -> "LlamaCppServer":
        cmd = [str(llama_server_binary()), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
               "-c", str(self.ctx), "--parallel", str(self.parallel), "--metrics", "--threads", "1",
               "--threads-batch", "1", "--no-repack", "--no-webui", *self.args]
        # one thread: on a loaded 2-core box ggml worker threads spinning at a barrier make decoding ~20x slower
        self.launch(cmd, {**os.environ})
        self.wait_ready("/health", (200,), START_TIMEOUT_S, 0.3)
        return self


