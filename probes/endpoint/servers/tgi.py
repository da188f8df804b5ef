"""Text Generation Inference: `GET /info` {model_id, max_input_tokens, max_total_tokens, ...}, `POST /tokenize`
{inputs} -> [{id, text, start, stop}] (the tokenizer with its special tokens, as /generate feeds the model).
The Messages API (/v1/chat/completions) renders the model's own chat template; TGI does not return it."""
from __future__ import annotations

from probes.endpoint.surface import Surface
from probes.endpoint.types import ServerContext


def detect(client) -> dict | None:
    body = client.get("/info")
    return body if isinstance(body, dict) and "model_id" in body and "max_total_tokens" in body else None


class TgiSurface(Surface):
    kind = "tgi"
    label = "Text Generation Inference server"

    def tokenize(self, text: str) -> list[int] | None:
        return parse_tokens(self.client.post("/tokenize", {"inputs": text}))

    def context(self) -> ServerContext | None:
        n = self.info.get("max_total_tokens")
        return ServerContext(int(n), "GET /info max_total_tokens") if isinstance(n, int) else None


def parse_tokens(body) -> list[int]:
    if not isinstance(body, list):
        raise ValueError(f"expected a list of tokens, found {str(body)[:200]}")
    return [int(t["id"]) for t in body]
