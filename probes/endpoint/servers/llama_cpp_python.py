"""llama-cpp-python's server (llama_cpp/server/app.py): OpenAI routes plus `/extras/tokenize` {input, model}
-> {tokens} (special tokens parsed, BOS added by the GGUF's add_bos policy, as its completion path does).
Its request defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.1) are the field
defaults of the request schema, published in its FastAPI `/openapi.json`. It caches the last prompt's KV with
no per-request switch; its context window shows in the error of an oversize request."""
from __future__ import annotations

from probes.endpoint.surface import Surface, sampling_values
from probes.endpoint.types import SamplingDefaults

SCHEMA_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                "repetition_penalty": "repeat_penalty"}


def detect(client) -> dict | None:
    body = client.post("/extras/tokenize", {"input": "a"})
    return body if isinstance(body, dict) and isinstance(body.get("tokens"), list) else None


class LlamaCppPythonSurface(Surface):
    kind = "llama-cpp-python"
    label = "llama-cpp-python server"

    def tokenize(self, text: str) -> list[int] | None:
        body = self.client.post("/extras/tokenize", {"input": text, **({"model": self.model} if self.model else {})})
        return [int(t) for t in body["tokens"]]

    def greedy_extra(self) -> dict:
        return {"repeat_penalty": 1.0, "top_k": 0, "min_p": 0.0, "top_p": 1.0}

    def defaults(self) -> SamplingDefaults | None:
        return parse_openapi_defaults(self.client.get("/openapi.json"))


def parse_openapi_defaults(schema: dict) -> SamplingDefaults | None:
    """Defaults of CreateChatCompletionRequest's sampling fields in a FastAPI schema."""
    schemas = (schema.get("components") or {}).get("schemas") or {}
    request = schemas.get("CreateChatCompletionRequest")
    if not isinstance(request, dict):
        return None
    props = request.get("properties") or {}
    defaults = {name: prop.get("default") for name, prop in props.items() if isinstance(prop, dict)}
    values = sampling_values(defaults, SCHEMA_NAMES)
    return SamplingDefaults(values, "GET /openapi.json (CreateChatCompletionRequest defaults)") if values else None
