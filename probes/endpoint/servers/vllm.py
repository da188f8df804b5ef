"""vLLM's OpenAI server: `POST /tokenize` {model, prompt | messages, add_special_tokens, add_generation_prompt,
return_token_strs} -> {count, max_model_len, tokens, token_strs}; `/detokenize` {tokens} -> {prompt}; `/v1/models`
carries max_model_len. A chat
request's ids are what /tokenize gives for the same messages (chat defaults add_special_tokens=False). vLLM does
not publish the sampling defaults it takes from generation_config.json (it only logs them)."""
from __future__ import annotations

from probes.endpoint.surface import Surface
from probes.endpoint.types import ServerContext


def detect(client) -> dict | None:
    body = client.post("/tokenize", {"prompt": "a"})
    return body if isinstance(body, dict) and "max_model_len" in body and "tokens" in body else None


class VllmSurface(Surface):
    kind = "vllm"
    label = "vLLM server"
    # vLLM constrains a call's arguments to the tool's schema only for tools marked "strict": true, or for every
    # tool with --tool-strict-level parameter (its default "auto" reads each tool's own `strict`)
    enforces_tool_schemas = False

    def _tokenize(self, body: dict) -> dict:
        return self.client.post("/tokenize", {**({"model": self.model} if self.model else {}), **body})

    def tokenize(self, text: str) -> list[int] | None:
        return [int(t) for t in self._tokenize({"prompt": text, "add_special_tokens": True})["tokens"]]

    def chat_prompt_ids(self, messages: list[dict]) -> list[int] | None:
        body = self._tokenize({"messages": messages, "add_generation_prompt": True})
        return [int(t) for t in body["tokens"]]

    def render(self, messages: list[dict]) -> str | None:
        """The chat prompt's ids detokenized (`POST /detokenize` {tokens} -> {prompt}); token_strs would be
        byte-level BPE symbols (Ġ, Ċ), not text."""
        ids = self.chat_prompt_ids(messages)
        body = self.client.post("/detokenize", {**({"model": self.model} if self.model else {}), "tokens": ids})
        return body.get("prompt") if isinstance(body, dict) else None

    def greedy_extra(self) -> dict:
        return {"repetition_penalty": 1.0, "top_k": -1, "top_p": 1.0, "min_p": 0.0}

    def context(self) -> ServerContext | None:
        n = self.info.get("max_model_len")
        return ServerContext(int(n), "POST /tokenize max_model_len") if isinstance(n, int) else None
