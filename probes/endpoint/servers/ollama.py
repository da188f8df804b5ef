"""Ollama: no tokenize route. `POST /api/generate` {model, prompt, raw: true, options: {num_predict}} skips the
template and reports `prompt_eval_count` (the prompt's token count); `POST /api/show` {model} gives model_info
(GGUF keys: <arch>.context_length, <arch>.rope.freq_base, tokenizer.ggml.*), `parameters` (the Modelfile's
stop, temperature, num_ctx ... as text lines) and the Go `template`. OpenAI routes live under /v1."""
from __future__ import annotations

import shlex

from probes.endpoint.surface import Surface, sampling_values
from probes.endpoint.types import SamplingDefaults, ServerContext, StopSet

PARAM_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
               "repetition_penalty": "repeat_penalty"}


def detect(client) -> dict | None:
    body = client.get("/api/version")
    return body if isinstance(body, dict) and "version" in body else None


def parse_parameters(text: str) -> dict[str, list[str]]:
    """`stop "<|im_end|>"\\nnum_ctx 4096` -> {"stop": ["<|im_end|>"], "num_ctx": ["4096"]}."""
    out: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        try:
            parts = shlex.split(line)
        except ValueError:
            parts = line.split(None, 1)
        if len(parts) >= 2:
            out.setdefault(parts[0], []).append(" ".join(parts[1:]))
    return out


def _number(values: list[str] | None):
    try:
        return float(values[-1]) if values else None
    except ValueError:
        return None


class OllamaSurface(Surface):
    kind = "ollama"
    label = "Ollama server"

    def __init__(self, client, model, info=None):
        super().__init__(client, model, info)
        self._show = None

    def show(self) -> dict:
        if self._show is None:
            self._show = self.client.post("/api/show", {"model": self.model})
        return self._show

    def prompt_count(self, text: str) -> int | None:
        body = self.client.post("/api/generate", {"model": self.model, "prompt": text, "raw": True, "stream": False,
                                                  "options": {"num_predict": 1, "temperature": 0}})
        return body.get("prompt_eval_count")

    def greedy_extra(self) -> dict:
        return {"top_p": 1.0}

    def _parameters(self) -> dict[str, list[str]]:
        return parse_parameters(self.show().get("parameters", ""))

    def defaults(self) -> SamplingDefaults | None:
        params = {k: _number(v) for k, v in self._parameters().items()}
        values = sampling_values(params, PARAM_NAMES)
        return SamplingDefaults(values, "POST /api/show parameters") if values else None

    def stop_set(self) -> StopSet | None:
        return StopSet(strings=self._parameters().get("stop", []), source="POST /api/show parameters")

    def context(self) -> ServerContext | None:
        info = self.show().get("model_info") or {}
        arch = info.get("general.architecture", "")
        num_ctx = _number(self._parameters().get("num_ctx"))
        rope = {k.split(".rope.", 1)[1]: v for k, v in info.items() if ".rope." in k and isinstance(v, (int, float))}
        if num_ctx is not None:
            return ServerContext(int(num_ctx), "POST /api/show parameters num_ctx", rope)
        n = info.get(f"{arch}.context_length")
        return ServerContext(int(n) if isinstance(n, int) else None, f"POST /api/show {arch}.context_length", rope)
