"""llama.cpp's own server (tools/server): `/tokenize` {content, add_special, parse_special, with_pieces},
`/apply-template` {messages} -> {prompt}, `/props` (chat_template, bos/eos token text, n_ctx and the default
sampling settings under default_generation_settings[.params]). `cache_prompt` is a per-request switch."""
from __future__ import annotations

from probes.endpoint.surface import Surface, sampling_values
from probes.endpoint.types import SamplingDefaults, ServerContext, StopSet

PARAM_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
               "repetition_penalty": "repeat_penalty"}


def detect(client) -> dict | None:
    body = client.get("/props")
    return body if isinstance(body, dict) and "default_generation_settings" in body else None


def generation_settings(props: dict) -> dict:
    settings = props.get("default_generation_settings") or {}
    params = settings.get("params")
    return {**settings, **params} if isinstance(params, dict) else settings


class LlamaCppSurface(Surface):
    kind = "llama.cpp"
    label = "llama.cpp server"

    def tokenize(self, text: str) -> list[int] | None:
        body = self.client.post("/tokenize", {"content": text, "add_special": True, "parse_special": True})
        return parse_tokens(body)

    def render(self, messages: list[dict]) -> str | None:
        body = self.client.post("/apply-template", {"messages": messages})
        return body.get("prompt") if isinstance(body, dict) else None

    def greedy_extra(self) -> dict:
        return {"cache_prompt": False, "repeat_penalty": 1.0, "top_k": 0, "min_p": 0.0, "top_p": 1.0}

    def defaults(self) -> SamplingDefaults | None:
        values = sampling_values(generation_settings(self.info), PARAM_NAMES)
        return SamplingDefaults(values, "GET /props default_generation_settings") if values else None

    def stop_set(self) -> StopSet | None:
        eos = self.info.get("eos_token")
        return StopSet(strings=[eos] if isinstance(eos, str) and eos else [], source="GET /props eos_token")

    def context(self) -> ServerContext | None:
        n_ctx = generation_settings(self.info).get("n_ctx")
        if not isinstance(n_ctx, int):
            return None
        return ServerContext(int(n_ctx), "GET /props default_generation_settings.n_ctx")


def parse_tokens(body) -> list[int]:
    """{tokens: [int]} or, with with_pieces, {tokens: [{id, piece}]}."""
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list):
        raise ValueError(f"no tokens in the answer: {str(body)[:200]}")
    return [int(t["id"]) if isinstance(t, dict) else int(t) for t in tokens]
