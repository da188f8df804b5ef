"""Prompt log-probabilities from a live server: log p(token_i | the tokens before it) for every token of a text,
as the server tokenized and scored it (what a perplexity or a copy test needs; a server's generated tokens alone
follow its own greedy path, not our text).

Who offers them, and how:
- vLLM and other OpenAI completion servers: `POST /v1/completions` {echo: true, logprobs: 1, max_tokens: 1}; the
  answer's `logprobs.tokens` / `token_logprobs` list the prompt's tokens (the first has none) then the one
  generated token (`usage.completion_tokens` says how many to drop).
- llama-cpp-python: the same route, with a catch (llama_cpp/llama.py `_create_completion`, 0.3.x): it drops a
  leading BOS from the echoed tokens but always reads the logprobs from logit row 0, so for a model that adds no
  BOS the logprob shown for token i is the row that predicts token i+1 (nonsense for a healthy model). The text
  is therefore sent behind the BOS token's text when the server adds none and the caller knows it (a reference
  model); without it the route is reported unusable.
- TGI: `POST /generate` {parameters: {details, decoder_input_details, max_new_tokens: 1}} -> `details.prefill`
  [{id, text, logprob}] (the first logprob is null).
- llama.cpp's server refuses echo ("Only no echo is supported") and has no prompt-logprob field; Ollama has none.
"""
from __future__ import annotations

from dataclasses import dataclass

from probes.endpoint import openai_api
from probes.endpoint.client import EndpointError

NO_PROMPT_LOGPROBS = {
    "llama.cpp": "llama.cpp's server returns no prompt logprobs (/v1/completions refuses echo: "
                 "'Only no echo is supported')",
    "ollama": "Ollama returns no prompt logprobs",
}


class NotOffered(Exception):
    """The server cannot score a prompt; the message says why (the caller skips, naming it)."""


@dataclass
class ScoredPrompt:
    """The prompt's tokens as the server shows them, each with log p(token | tokens before it)."""
    tokens: list[str]
    logprobs: list[float | None]        # None where the server gives none (the first token, a BOS)
    ids: list[int] | None               # when the server says (TGI)
    route: str

    def ends(self, text: str) -> list[int] | None:
        """Character offset in `text` where each token ends, counted back from the text's end (the joined tokens
        may carry a BOS or other prefix before the text); None when the tokens do not spell the text."""
        joined = "".join(self.tokens)
        if not joined.endswith(text):
            return None
        lead, out, at = len(joined) - len(text), [], 0
        for token in self.tokens:
            at += len(token)
            out.append(at - lead)
        return out


def score_text(surface, text: str, bos_text: str | None = None) -> ScoredPrompt:
    """The server's prompt logprobs for `text`; NotOffered when it has none, EndpointError when a request fails."""
    if surface.kind in NO_PROMPT_LOGPROBS:
        raise NotOffered(NO_PROMPT_LOGPROBS[surface.kind])
    if surface.kind == "tgi":
        return tgi_prefill(surface, text)
    prompt = text
    if surface.kind == "llama-cpp-python" and not surface.tokenize(""):     # the server adds no BOS
        if not bos_text:
            raise NotOffered("llama-cpp-python misaligns echo logprobs for a model that adds no BOS (token i is "
                             "shown with the row predicting token i+1) and no reference model names the BOS text "
                             "to send first")
        prompt = bos_text + text
    return echo(surface, prompt)


def echo(surface, prompt: str) -> ScoredPrompt:
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1, "stream": False,
            **surface.greedy_extra()}
    if surface.model:
        body["model"] = surface.model
    try:
        answer = openai_api.parse_completion(surface.client.post("/v1/completions", body))
    except EndpointError as e:
        if e.status is not None and 400 <= e.status < 500:
            raise NotOffered(f"/v1/completions refused echo with logprobs: {e}") from None
        raise
    if not answer.tokens:
        raise NotOffered("/v1/completions answered echo without per-token logprobs")
    generated = answer.completion_tokens if isinstance(answer.completion_tokens, int) else 1
    tokens = answer.tokens[:len(answer.tokens) - generated]
    return ScoredPrompt([t.token for t in tokens], [t.logprob for t in tokens], None, "/v1/completions echo")


def tgi_prefill(surface, text: str) -> ScoredPrompt:
    body = {"inputs": text, "parameters": {"max_new_tokens": 1, "details": True, "decoder_input_details": True,
                                           "do_sample": False}}
    answer = surface.client.post("/generate", body)
    prefill = (answer.get("details") or {}).get("prefill") if isinstance(answer, dict) else None
    if not isinstance(prefill, list) or not prefill:
        raise NotOffered("TGI /generate answered without details.prefill (decoder_input_details)")
    return ScoredPrompt([str(t.get("text", "")) for t in prefill], [t.get("logprob") for t in prefill],
                        [int(t["id"]) for t in prefill], "/generate decoder_input_details")
