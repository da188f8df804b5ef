"""Fake servers for the endpoint competence probes (EPT06x), in the answer shapes of each server's documented API:
vLLM and OpenAI completions with echo (`logprobs.tokens/token_logprobs`, usage), TGI `/generate` with
`details.prefill`, llama.cpp's chat-form completion logprobs (`logprobs.content[{id, token, logprob}]`) and its
refusal of echo, Ollama's OpenAI route without logprobs.

The "model" behind them is a toy with the two behaviours the probes measure: `healthy` predicts ordinary text at
2.5 nats/token, a token it has already seen after the same token at 0.2 (induction), continues well-known
sequences and copies a shown word sequence; `broken` spends 11 nats on every token and answers "piece in piece
in ..." (a short loop, as the layer-reversed SmolLM2 GGUF does on llama.cpp). `window`: the toy's prompt
logprobs see only that many tokens back (a server that stops reading: `probe endpoint --context N`).
"""
from __future__ import annotations

import json
import re

import httpx

from probes.endpoint.competence_probe import SEQUENCES

TOKEN = re.compile(r"\s*\S+|\s+")
BOS = "<s>"


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def prompt_logprobs(toks: list[str], healthy: bool, window: int | None = None) -> list[float | None]:
    """log p(token i | before) of the toy model (seeing `window` tokens back at most); None for the first token."""
    out: list[float | None] = [None]
    for i in range(1, len(toks)):
        back = range(max(0, i - 1 - window) if window else 0, i - 1)
        seen = any(toks[j] == toks[i - 1] and toks[j + 1] == toks[i] for j in back)
        out.append((-0.2 if seen else -2.5) if healthy else -11.0)
    return out


def continuation(prompt: str, healthy: bool, words: int = 16) -> str:
    if not healthy:
        return " piece in piece in piece in piece in"
    for seq, expected in SEQUENCES:
        if prompt == seq:
            return f" {expected}, and so on"
    said = prompt.split()
    out, last = [], said[-1]
    for _ in range(words):                   # induction: the word that followed `last` when it was first seen
        at = said.index(last)
        if at + 1 >= len(said):
            break
        last = said[at + 1]
        out.append(last)
    return "".join(" " + w for w in out)


class FakeServer:
    """kind: vllm, tgi, llama.cpp, llama-cpp-python, ollama or openai (an OpenAI server that refuses echo)."""

    def __init__(self, kind: str, healthy: bool = True, bos: bool = True, window: int | None = None):
        self.kind, self.healthy, self.bos, self.window = kind, healthy, bos, window
        self.seen: list[dict] = []

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        route = request.url.path
        self.seen.append({"route": route, "body": body})
        answer = self.answer(request.method, route, body)
        if answer is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        status, payload = answer if isinstance(answer, tuple) else (200, answer)
        return httpx.Response(status, json=payload)

    def answer(self, method: str, route: str, body: dict):
        kind = self.kind
        if route == "/v1/models":
            return {"data": [{"id": "toy", "max_model_len": 4096}]}
        if route == "/props" and kind == "llama.cpp":
            return {"default_generation_settings": {"n_ctx": 4096}}
        if route == "/info" and kind == "tgi":
            return {"model_id": "toy", "max_total_tokens": 4096}
        if route == "/api/version" and kind == "ollama":
            return {"version": "0.5.0"}
        if route == "/extras/tokenize" and kind == "llama-cpp-python":
            return {"tokens": self.tokenize({"prompt": body["input"]})["tokens"]}
        if route == "/tokenize" and kind in ("vllm", "llama.cpp", "tgi"):
            return self.tokenize(body)
        if route == "/generate" and kind == "tgi":
            return self.prefill(body["inputs"])
        if route == "/v1/completions":
            return self.completion(body)
        return None

    def tokenize(self, body: dict):
        text = body.get("prompt", body.get("content", body.get("inputs", "")))
        toks = ([BOS] if self.bos else []) + tokens(text)
        ids = list(range(1, len(toks) + 1))
        if self.kind == "tgi":
            return [{"id": i, "text": t} for i, t in zip(ids, toks)]
        return {"tokens": ids, "count": len(ids), "max_model_len": 4096}

    def prefill(self, text: str):
        toks = ([BOS] if self.bos else []) + tokens(text)
        values = prompt_logprobs(toks, self.healthy)
        return {"generated_text": " x", "details": {"prefill": [{"id": i, "text": t, "logprob": v}
                                                                 for i, (t, v) in enumerate(zip(toks, values))]}}

    def completion(self, body: dict):
        prompt = body["prompt"]
        if body.get("echo"):
            if self.kind in ("llama.cpp", "openai"):
                return 400, {"error": {"message": "Only no echo is supported"}}
            toks = ([BOS] if self.bos else []) + tokens(prompt) + [" x"]
            values = prompt_logprobs(toks, self.healthy, self.window)
            lp = {"tokens": toks, "token_logprobs": values, "top_logprobs": [None] * len(toks)}
            return {"choices": [{"text": prompt + " x", "logprobs": lp, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": len(toks) - 1, "completion_tokens": 1}}
        text = continuation(prompt, self.healthy)
        choice = {"text": text, "finish_reason": "length"}
        if body.get("logprobs") and self.kind == "llama.cpp":
            choice["logprobs"] = {"content": [{"id": 7, "token": t, "logprob": -0.1 if self.healthy else -9.0,
                                               "top_logprobs": []} for t in tokens(text)]}
        return {"choices": [choice], "usage": {"prompt_tokens": len(tokens(prompt)),
                                               "completion_tokens": len(tokens(text))}}
