"""A server surface: what one kind of server lets us ask, behind one interface.

The base class is the plain OpenAI-compatible server: chat and completion requests, token counts from
`usage.prompt_tokens`, nothing else. Each server kind (vLLM, llama.cpp, llama-cpp-python, TGI, Ollama) lives in
its own module and overrides what it can do better. A method returns None when the server cannot tell.
"""
from __future__ import annotations

import re

from probes.endpoint import openai_api
from probes.endpoint.client import EndpointClient, EndpointError
from probes.endpoint.types import Generation, SamplingDefaults, ServerContext, StopSet

CONTEXT_ERRORS = (re.compile(r"maximum context length is (\d+)", re.I), re.compile(r"context window of (\d+)", re.I),
                  re.compile(r"context size \(?(\d+)", re.I), re.compile(r"n_ctx[^\d]{0,20}(\d+)", re.I),
                  re.compile(r"must have less than (\d+) tokens", re.I))


class Surface:
    kind = "openai"
    label = "OpenAI-compatible server"
    # must the server make every tool call's arguments fit the tool's schema, strict or not? Assumed (llama-server
    # --jinja builds a grammar from every tool); vLLM says otherwise (probes/endpoint/servers/vllm.py)
    enforces_tool_schemas = True

    def __init__(self, client: EndpointClient, model: str | None, info: dict | None = None):
        self.client = client
        self.model = model
        self.info = info or {}      # what detection saw (e.g. the /props or /info body)

    # -- prompt side ------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int] | None:
        """Ids the server feeds the model for `text` as a completion prompt (its own BOS policy); None: no route."""
        return None

    def chat_prompt_ids(self, messages: list[dict]) -> list[int] | None:
        """Ids of the chat prompt the server builds for `messages` (generation prompt included)."""
        rendered = self.render(messages)
        return self.tokenize(rendered) if rendered is not None else None

    def render(self, messages: list[dict]) -> str | None:
        """The chat prompt text the server renders for `messages`, when it says."""
        return None

    def chat_prompt_count(self, messages: list[dict]) -> int | None:
        """usage.prompt_tokens of a one-token chat request."""
        return self.chat(messages, max_tokens=1).prompt_tokens

    def prompt_count(self, text: str) -> int | None:
        return self.completion(text, max_tokens=1).prompt_tokens

    # -- generation -------------------------------------------------------------------------------
    def greedy_extra(self) -> dict:
        """Server-specific request fields that make temperature-0 decoding plain greedy (no penalties, no cache)."""
        return {}

    def chat(self, messages: list[dict], *, max_tokens: int, top_logprobs: int = 0) -> Generation:
        return openai_api.chat(self.client, self.model, messages, max_tokens=max_tokens, top_logprobs=top_logprobs,
                               extra=self.greedy_extra())

    def completion(self, prompt: str, *, max_tokens: int, logprobs: int = 0) -> Generation:
        return openai_api.completion(self.client, self.model, prompt, max_tokens=max_tokens, logprobs=logprobs,
                                     extra=self.greedy_extra())

    # -- settings ---------------------------------------------------------------------------------
    def defaults(self) -> SamplingDefaults | None:
        return None

    def stop_set(self) -> StopSet | None:
        return None

    def context(self) -> ServerContext | None:
        return None

    def probe_context(self, n_tokens: int) -> ServerContext:
        """Send a prompt of about n_tokens (one token per ' hello') with max_tokens=1: the context error names the
        server's window; an accepted prompt says the window is at least that long."""
        try:
            self.completion(" hello" * n_tokens, max_tokens=1)
        except EndpointError as e:
            for pattern in CONTEXT_ERRORS:
                match = pattern.search(str(e))
                if match:
                    return ServerContext(int(match.group(1)), f"error of a {n_tokens}-token request: {e}")
            if e.status is None or e.status >= 500:
                raise
            return ServerContext(None, f"a {n_tokens}-token request was refused without naming the window: {e}")
        return ServerContext(None, f"a {n_tokens}-token request was accepted", accepted_prompt=n_tokens)


def sampling_values(source: dict, names: dict[str, str]) -> dict[str, float]:
    """Pick numeric settings out of `source` under our names: names maps our name -> the server's key."""
    out = {}
    for ours, theirs in names.items():
        value = source.get(theirs)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[ours] = float(value)
    return out
