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
    prompt_tokens: int | None = None    # usage.prompt_tokens, when the server counts them

    def ends(self, text: str, ascii_only: bool = False) -> list[int] | None:
        """Character offset in `text` where each token ends, counted back from the text's end (the joined tokens
        may carry a BOS or other prefix before the text); None when the tokens do not spell the text.
        ascii_only: compare (and count) ASCII characters only, for servers that show a token holding part of a
        multi-byte character as "" or U+FFFD (llama-cpp-python, vLLM)."""
        keep = _ascii if ascii_only else (lambda s: s)
        pieces = [keep(t) for t in self.tokens]
        joined, text = "".join(pieces), keep(text)
        if not joined.endswith(text):
            return None
        lead, out, at = len(joined) - len(text), [], 0
        for piece in pieces:
            at += len(piece)
            out.append(at - lead)
        return out

    def text_start(self, text: str) -> int | None:
        """Index of the first token of `text` (after a BOS or prefix), or None when the tokens do not spell it."""
        for ascii_only in (False, True):
            ends = self.ends(text, ascii_only)
            if ends is not None:
                return next((i for i, e in enumerate(ends) if e > 0), None)
        return None


def _ascii(text: str) -> str:
    return "".join(c for c in text if c < "\x80")


def not_offered(surface) -> str | None:
    """Why this kind of server cannot score a prompt at all (None: it may; asking will tell)."""
    return NO_PROMPT_LOGPROBS.get(surface.kind)


def prompt_prefix(surface, bos_text: str | None = None, tokenize=None) -> str:
    """What to send before a text so the server's prompt logprobs line up with it ("" for most servers);
    NotOffered when this server cannot score a prompt. One tokenize request on llama-cpp-python (`tokenize`: a
    cached Surface.tokenize), none elsewhere."""
    why = not_offered(surface)
    if why:
        raise NotOffered(why)
    if surface.kind == "llama-cpp-python" and not (tokenize or surface.tokenize)(""):   # the server adds no BOS
        if not bos_text:
            raise NotOffered("llama-cpp-python misaligns echo logprobs for a model that adds no BOS (token i is "
                             "shown with the row predicting token i+1) and no reference model names the BOS text "
                             "to send first")
        return bos_text
    return ""


def served_text_logprobs(surface, text: str, prefix: str = "") -> ScoredPrompt:
    """The server's prompt logprobs for `text` sent behind `prefix` (prompt_prefix); NotOffered when it has
    none, EndpointError when a request fails."""
    if surface.kind == "tgi":
        return tgi_prefill(surface, prefix + text)
    return echo(surface, prefix + text)


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
    tokens = prompt_part(answer.tokens, prompt, generated)
    return ScoredPrompt([t.token for t in tokens], [t.logprob for t in tokens], None, "/v1/completions echo",
                        answer.prompt_tokens if isinstance(answer.prompt_tokens, int) else None)


def prompt_part(tokens: list, prompt: str, generated: int) -> list:
    """The echoed tokens that are the prompt's: less the `generated` ones, unless they were not echoed (a stop
    token generated is counted in usage but left out of the echo by llama-cpp-python), which the prompt's last
    characters tell."""
    tail = _ascii(prompt)[-16:]
    for drop in dict.fromkeys((generated, 0)):
        kept = tokens[:len(tokens) - drop]
        if _ascii("".join(t.token for t in kept)).endswith(tail):
            return kept
    return tokens[:len(tokens) - generated]


def tgi_prefill(surface, text: str) -> ScoredPrompt:
    body = {"inputs": text, "parameters": {"max_new_tokens": 1, "details": True, "decoder_input_details": True,
                                           "do_sample": False}}
    answer = surface.client.post("/generate", body)
    prefill = (answer.get("details") or {}).get("prefill") if isinstance(answer, dict) else None
    if not isinstance(prefill, list) or not prefill:
        raise NotOffered("TGI /generate answered without details.prefill (decoder_input_details)")
    return ScoredPrompt([str(t.get("text", "")) for t in prefill], [t.get("logprob") for t in prefill],
                        [int(t["id"]) for t in prefill], "/generate decoder_input_details")
