"""Plain data the endpoint adapters return (no reference-engine knowledge here)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    """One generated token as the server reports it."""
    token: str                                        # the piece's text as the server shows it ("" = invisible)
    logprob: float | None = None
    top: dict[str, float] = field(default_factory=dict)   # alternatives: piece text -> logprob
    token_id: int | None = None                       # when the server says (TGI, llama.cpp)


@dataclass
class Generation:
    """One completion: text, why it ended, the usage numbers and (when asked) per-token logprobs."""
    text: str
    finish_reason: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokens: list[TokenLogprob] | None = None
    route: str = ""


@dataclass
class SamplingDefaults:
    """What the server samples with when a request names no sampling parameter (None: not exposed)."""
    values: dict[str, float]                          # temperature, top_p, top_k, min_p, repetition_penalty
    source: str                                       # where it was read, e.g. "GET /props"


@dataclass
class ServerContext:
    """Context window and RoPE settings the server reports (any may be None)."""
    max_context: int | None = None
    source: str = ""
    rope: dict[str, float] = field(default_factory=dict)
    accepted_prompt: int | None = None                # a prompt this long was accepted (no context error)


@dataclass
class StopSet:
    """Stop tokens / strings the server says it uses by default."""
    token_ids: list[int] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    source: str = ""
