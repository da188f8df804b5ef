"""The OpenAI-compatible routes every server here speaks: /v1/models, /v1/chat/completions, /v1/completions.

Parsers are separate from the requests so recorded responses can be checked without a server.
"""
from __future__ import annotations

from probes.endpoint.client import EndpointClient
from probes.endpoint.types import Generation, TokenLogprob


def list_models(client: EndpointClient) -> list[dict]:
    body = client.get("/v1/models")
    data = body.get("data") if isinstance(body, dict) else None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def chat(client: EndpointClient, model: str | None, messages: list[dict], *, max_tokens: int,
         top_logprobs: int = 0, extra: dict | None = None) -> Generation:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": False, **(extra or {})}
    if model:
        body["model"] = model
    if top_logprobs:
        body.update(logprobs=True, top_logprobs=top_logprobs)
    return parse_chat(client.post("/v1/chat/completions", body))


def completion(client: EndpointClient, model: str | None, prompt: str, *, max_tokens: int,
               logprobs: int = 0, extra: dict | None = None) -> Generation:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": False, **(extra or {})}
    if model:
        body["model"] = model
    if logprobs:
        body["logprobs"] = logprobs
    return parse_completion(client.post("/v1/completions", body))


def _choice(body) -> tuple[dict, dict]:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError(f"no choices in the answer: {str(body)[:200]}")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    return choices[0], usage


def parse_chat(body) -> Generation:
    choice, usage = _choice(body)
    message = choice.get("message") or {}
    tokens = None
    content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(content, list):
        tokens = content_logprobs(content)
    return Generation(str(message.get("content") or ""), choice.get("finish_reason"), usage.get("prompt_tokens"),
                      usage.get("completion_tokens"), tokens, "/v1/chat/completions")


def parse_completion(body) -> Generation:
    choice, usage = _choice(body)
    tokens = None
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):     # llama.cpp answers in the chat form
        tokens = content_logprobs(lp["content"])
    elif isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
        values = lp.get("token_logprobs") or [None] * len(lp["tokens"])
        tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
        tokens = [TokenLogprob(str(tok), value, {str(k): v for k, v in (top or {}).items() if v is not None})
                  for tok, value, top in zip(lp["tokens"], values, tops)]
    return Generation(str(choice.get("text") or ""), choice.get("finish_reason"), usage.get("prompt_tokens"),
                      usage.get("completion_tokens"), tokens, "/v1/completions")


def content_logprobs(content: list) -> list[TokenLogprob]:
    """The chat form [{token, logprob, top_logprobs: [{token, logprob}], id?}] (llama.cpp adds the id)."""
    return [TokenLogprob(str(t.get("token", "")), t.get("logprob"),
                         {str(a.get("token", "")): a.get("logprob") for a in t.get("top_logprobs") or []
                          if isinstance(a, dict) and a.get("logprob") is not None},
                         t.get("id") if isinstance(t.get("id"), int) else None)
            for t in content if isinstance(t, dict)]
