"""The serving-chain faults, planted by rewriting requests and answers between the client and a server.

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
    late-stream-diverge, late-cache-diverge   the same from token LATE_TOKEN on (past the 24 tokens once compared)
    drop-middle       DROP_WORDS words taken out of the middle of every long message that is neither the first nor the
                      last of its conversation (a gateway thinning the history); the server reads the thinned prompt
    slow:SECONDS      (proxy only) every completion answered SECONDS late: a prober's timeout, not a server fault
    cut:ROLE:WHERE    a third of every long message of ROLE (system, user, tool) cut at WHERE (start, middle, end);
                      the server then reads (and reports) the cut prompt
    stream-word       every streamed answer's 3rd text delta replaced by " banana", its logprobs left alone
    seen-word         an answer to messages seen before: one word replaced in the content, logprobs left alone
    prefix-word       an answer after another request that shared its long first message: one word replaced
    empty-calls       finish_reason "tool_calls" with an empty tool_calls list (the calls dropped, content empty)
    args-empty        every call's arguments "{}" where the model wrote some (a parser that lost them)
    stream-call-lost  a streamed answer's tool-call deltas dropped (vLLM's parser missing a call whose begin and end
                      arrive in one delta), the non-streamed answer left whole
    id-history        a request whose history carries a tool-call id not of OpenAI's `call_...` form (Kimi K2's
                      `functions.get_weather:0`, `call00003`) answered with its calls dropped and finish "stop"
    thinking-off-misrouted   with chat_template_kwargs enable_thinking false, the answer moved to
                      reasoning_content and content null
    zero-arg-lost     a call whose arguments are "{}" (a tool without parameters) dropped, content empty, finish
                      "stop", streamed or not (ollama#17328's parser)
    server-truncate:N (proxy only) `truncate_prompt_tokens: N` added to every chat request: vLLM itself keeps the
                      prompt's last N tokens (a gateway configured to cut), and reports the cut prompt's count
    bos-dedup         (proxy only) /apply-template's prompt without its leading bos_token text (GET /props), whether
                      or not the server adds BOS back: llama-server --jinja before ggml-org/llama.cpp#15086 (GLM's
                      [gMASK] lost); the prompt the server feeds is that rendering, tokenized with its add-BOS policy
"""
from __future__ import annotations

import json
import re

import httpx

from tests.load_servers import _Base, _Handler

FAULTS = ("raw-text-call", "args-not-json", "args-double", "args-schema", "finish-stop", "stream-args",
          "tools-dropped", "think-leak", "reasoning-dropped", "format-ignored", "format-invalid", "truncate",
          "stream-diverge", "cache-diverge", "cut:user:middle", "cut:system:start", "cut:tool:end", "stream-word",
          "seen-word", "prefix-word", "late-stream-diverge", "late-cache-diverge", "drop-middle", "empty-calls",
          "args-empty", "stream-call-lost", "id-history", "thinking-off-misrouted", "zero-arg-lost")
OPENAI_ID = re.compile(r"call_[A-Za-z0-9]+")
LONG_PROMPT_CHARS = 4000
CUT_CHARS = 600             # a "long" message for the cut faults (the short probes are ~700 characters)
LATE_TOKEN = 30             # where the late faults change an answer (SmolLM2's parity answer: 51 tokens)
DROP_WORDS = 16             # about 20 SmolLM2 tokens of the notes: under the old slack of 3 % of a 1k message
DIVERGE_AT = {"stream-diverge": 4, "late-stream-diverge": LATE_TOKEN, "cache-diverge": 4,
              "late-cache-diverge": LATE_TOKEN}


def cut(text: str, where: str) -> str:
    third = len(text) // 3
    return {"start": text[third:], "middle": text[:third] + text[2 * third:], "end": text[:len(text) - third]}[where]


def drop_middle(text: str) -> str:
    words = text.split(" ")
    at = (len(words) - DROP_WORDS) // 2
    return " ".join(words[:at] + words[at + DROP_WORDS:])


def rewrite_request(fault: str | None, path: str, body: dict) -> dict:
    body = json.loads(json.dumps(body))
    if fault == "drop-middle":
        messages = body.get("messages") or []
        for message in messages[1:-1]:
            if isinstance(message.get("content"), str) and len(message["content"]) > CUT_CHARS:
                message["content"] = drop_middle(message["content"])
    if fault == "tools-dropped" and path in ("/v1/chat/completions", "/apply-template"):
        body.pop("tools", None)
        body.pop("tool_choice", None)
    elif fault == "format-ignored":
        body.pop("response_format", None)
    elif fault and fault.startswith("cut:"):
        _, role, where = fault.split(":")
        for message in body.get("messages") or []:
            text = message.get("content")
            if message.get("role") == role and isinstance(text, str) and len(text) > CUT_CHARS:
                message["content"] = cut(text, where)
    elif fault and fault.startswith("server-truncate:") and path == "/v1/chat/completions":
        body["truncate_prompt_tokens"] = int(fault.split(":")[1])
    elif fault == "truncate":
        for message in body.get("messages") or []:
            text = message.get("content")
            if isinstance(text, str) and len(text) > LONG_PROMPT_CHARS:
                message["content"] = text[-len(text) // 4:]
    return body


def _call_args(call: dict, fault: str) -> str:
    arguments = call["function"]["arguments"]
    if fault == "args-empty":
        return "{}"
    if fault == "args-not-json":
        return arguments[:max(len(arguments) // 2, 1)]
    if fault == "args-double":
        return json.dumps(arguments)
    value = json.loads(arguments)
    return json.dumps({**value, "unit": "kelvin"})


def request_key(body: dict) -> str:
    """Two requests are "the same" when they differ at most in their cache switch."""
    return json.dumps({k: v for k, v in body.items() if k != "cache_prompt"}, sort_keys=True)


class History:
    """What a faulty server remembers of earlier chat requests: the requests, their messages, the long first
    messages (a shared prefix) with the last message asked after each."""

    def __init__(self):
        self.requests, self.messages, self.prefixes = set(), set(), {}

    def see(self, body: dict) -> tuple[bool, bool, bool]:
        """(the same request came before, the same messages came before, another request shared this one's long
        first message with another last message), then remembers this one."""
        messages = body.get("messages") or [{}]
        key, said = request_key(body), json.dumps(messages, sort_keys=True)
        first, last = json.dumps(messages[0], sort_keys=True), json.dumps(messages[-1], sort_keys=True)
        shared = len(messages) > 1 and len(first) > 2000 and bool(self.prefixes.get(first, set()) - {last})
        flags = (key in self.requests, said in self.messages, shared)
        self.requests.add(key)
        self.messages.add(said)
        self.prefixes.setdefault(first, set()).add(last)
        return flags


def replace_word(text: str) -> str:
    """The answer with its third word replaced (a one-word change a client would not notice)."""
    words = text.split(" ")
    if not text.strip():
        return text
    if len(words) < 4:
        return text + " banana"
    return " ".join(words[:3] + ["banana"] + words[4:])


def rewrite_answer(fault: str | None, request: dict, answer: dict, seen: tuple = (False, False, False)) -> dict:
    """A non-streamed chat answer as the faulty server returns it (`seen`: History.see's flags for its request)."""
    repeated, said, shared = seen
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
    elif fault == "zero-arg-lost" and calls and all(json.loads(c["function"]["arguments"] or "{}") == {}
                                                     for c in calls):
        message["tool_calls"], message["content"], choice["finish_reason"] = [], "", "stop"
    elif (fault == "empty-calls" and calls) or (fault == "id-history" and calls and odd_ids(request)):
        message["tool_calls"], message["content"] = [], message.get("content") or ""
        choice["finish_reason"] = "tool_calls" if fault == "empty-calls" else "stop"
    elif fault == "thinking-off-misrouted" and thinking_off(request) and message.get("content"):
        message["reasoning_content"], message["content"] = message["content"], None
    elif fault in ("args-not-json", "args-double", "args-schema", "args-empty") and calls:
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
    elif (fault == "seen-word" and said) or (fault == "prefix-word" and shared):
        message["content"] = replace_word(message.get("content") or "")
    elif fault in ("cache-diverge", "late-cache-diverge") and repeated:
        tokens, at = (choice.get("logprobs") or {}).get("content") or [], DIVERGE_AT[fault]
        if len(tokens) > at:
            banana = {"token": " banana", "logprob": -0.01, "bytes": list(b" banana"), "top_logprobs": []}
            choice["logprobs"]["content"] = tokens[:at - 1] + [banana]
            message["content"] = "".join(t["token"] for t in tokens[:at - 1]) + " banana"
    return answer


def odd_ids(request: dict) -> bool:
    """The request's history holds a tool-call id not of OpenAI's `call_...` form."""
    return any(not OPENAI_ID.fullmatch(str(c.get("id"))) for m in request.get("messages") or []
               for c in m.get("tool_calls") or [])


def _delta(event: dict) -> dict:
    return ((event.get("choices") or [{}])[0] or {}).get("delta") or {}


def streamed_arguments(events: list[dict]) -> str | None:
    """The argument fragments of a stream's calls, joined (None: the stream carries no call)."""
    fragments = [(c.get("function") or {}).get("arguments") or "" for e in events for c in _delta(e).get("tool_calls")
                 or []]
    return "".join(fragments) if fragments else None


def thinking_off(request: dict) -> bool:
    return (request.get("chat_template_kwargs") or {}).get("enable_thinking") is False


def rewrite_events(fault: str | None, events: list[dict]) -> list[dict]:
    """A stream's JSON events as the faulty server sends them."""
    if fault == "stream-call-lost" or (fault == "zero-arg-lost" and streamed_arguments(events) == "{}"):
        kept = [e for e in events if not _delta(e).get("tool_calls")]
        for e in kept if fault == "zero-arg-lost" else ():
            if (e.get("choices") or [{}])[0].get("finish_reason"):
                e["choices"][0]["finish_reason"] = "stop"
        return kept
    if fault not in ("stream-args", "stream-diverge", "late-stream-diverge", "stream-word"):
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
        if fault == "stream-word" and isinstance(delta.get("content"), str) and delta["content"]:
            texts += 1
            if texts == 3:
                delta["content"] = " banana"
        if fault in DIVERGE_AT and isinstance(delta.get("content"), str) and delta["content"]:
            texts += 1
            if texts == DIVERGE_AT[fault]:
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
    history = History()

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
            answer = rewrite_answer(fault, body, answer, history.see(body))
        return httpx.Response(status, json=answer)
    return httpx.MockTransport(handle)


# The real server's answers, kept for the session: (upstream, path, request as sent upstream) -> its answers
# (status, raw answer) in the order they came. Every chain request is greedy and the healthy run shows that the
# server's answers do not depend on its cache or on what came before (EPT084), so the n-th time a proxy sends a
# request no fault rewrote, it gets the answer the n-th such request got from an earlier proxy; a proxy never
# replays what it asked itself (the same request twice in one run, as EPT084 sends it, reaches the server twice).
# Only what a fault changes upstream is asked again, and each fault is still planted on a real answer.
REPLAYS: dict[tuple, list[tuple[int, bytes]]] = {}
REPLAYED = ("/v1/chat/completions", "/apply-template", "/tokenize", "/detokenize")


class ChainProxy(_Base):
    """An HTTP proxy planting `fault` into every answer of a real server (None: a transparent proxy). With
    `replay`, a request the session has sent upstream before is answered from REPLAYS (see above)."""

    def __init__(self, upstream: str, fault: str | None = None, replay: bool = True):
        import threading
        self.upstream, self.fault, self.replay = upstream.rstrip("/"), fault, replay
        self.asked = self.replayed = 0          # POSTs sent upstream, POSTs answered from REPLAYS
        self.sent: dict[tuple, int] = {}        # how many times this proxy has had each request
        self.http = httpx.Client(base_url=self.upstream, timeout=httpx.Timeout(300, connect=5), trust_env=False)
        self.stopping = threading.Event()
        self.history = History()
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
        if owner.fault and owner.fault.startswith("slow:") and self.path in ("/v1/chat/completions", "/v1/completions"):
            owner.stopping.wait(float(owner.fault.split(":")[1]))     # stop() ends the wait
            if owner.stopping.is_set():
                return None         # the prober stopped waiting long ago
        try:
            status, content = self.upstream(body)
        except httpx.HTTPError as e:
            return self.send_json(502, {"error": {"message": str(e)}})
        if body.get("stream"):
            if status != 200:
                return self.send_json(status, json.loads(content))
            self.start_stream()
            self.event(stream_bytes(rewrite_events(owner.fault, read_events(content))))
            return
        answer = json.loads(content) if content else {}
        if status == 200 and self.path == "/v1/chat/completions":
            answer = rewrite_answer(owner.fault, body, answer, owner.history.see(body))
        if status == 200 and self.path == "/apply-template" and owner.fault == "bos-dedup":
            bos = owner.http.get("/props").json().get("bos_token") or ""
            prompt = answer.get("prompt", "")
            answer = {**answer, "prompt": prompt[len(bos):] if bos and prompt.startswith(bos) else prompt}
        self.send_json(status, answer)

    def upstream(self, body: dict) -> tuple[int, bytes]:
        """(status, raw answer) of the real server, replayed where an earlier proxy had the same request answered
        as often as this one has had it."""
        owner = self.owner
        key = (owner.upstream, self.path, json.dumps(body, sort_keys=True))
        n = owner.sent[key] = owner.sent.get(key, 0) + 1
        recorded = REPLAYS.setdefault(key, [])
        if owner.replay and n <= len(recorded):
            owner.replayed += 1
            return recorded[n - 1]
        owner.asked += 1
        r = owner.http.post(self.path, json=body)
        if owner.replay and r.status_code == 200 and self.path in REPLAYED and n == len(recorded) + 1:
            recorded.append((r.status_code, r.content))
        return r.status_code, r.content
