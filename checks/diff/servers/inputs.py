"""ServerPairInputs: two connected servers (the reference URL_A, the candidate URL_B), the request options, an
optional model directory whose tokenizer counts the prompts, and every answer asked at most once per side.

An answer that failed is remembered as its EndpointError, so each check sees the same failure and a check never
sends a request twice. The runner (llmdoctor/run/server_diff.py) connects both servers before building this:
an unreachable or non-OpenAI server is a one-line error there, not a context here.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from checks.catalogue.inputs import CheckInputs, ResourceError
from checks.diff.servers.requests import DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, TOP_LOGPROBS, chat_messages, prompt_texts
from probes.endpoint import Connection, EndpointError, Generation


@dataclass
class ServerSide:
    role: str                   # "reference" (URL_A) / "candidate" (URL_B)
    url: str
    connection: Connection

    @property
    def surface(self):
        return self.connection.surface

    @property
    def label(self) -> str:
        return f"{self.url} ({self.surface.label}, model {self.surface.model or '?'})"


@dataclass
class ServerOptions:
    prompts: int = DEFAULT_PROMPTS         # --prompts: how many probe prompts go to both servers
    max_tokens: int = DEFAULT_MAX_TOKENS   # --max-tokens: greedy tokens per answer
    top_logprobs: int = TOP_LOGPROBS


@dataclass
class ServerPairInputs:
    ref: ServerSide
    cand: ServerSide
    options: ServerOptions = field(default_factory=ServerOptions)
    tokenizer: Any = None                  # --model DIR: the reference tokenizer (None: not given)
    thresholds: dict = field(default_factory=dict)
    state: dict = field(default_factory=dict)
    total_build_seconds: float = 0.0
    build_seconds: dict = field(default_factory=dict)

    @property
    def sides(self) -> tuple[ServerSide, ServerSide]:
        return self.ref, self.cand

    def require(self, needs: tuple[str, ...]) -> None:
        if "tokenizer" in needs and self.tokenizer is None:
            raise ResourceError("tokenizer", "no --model given")

    def threshold(self, check_id: str, name: str, default: Any) -> Any:
        return CheckInputs.threshold(self, check_id, name, default)  # same typing rules as `check`

    def ask(self, side: ServerSide, key: str, request: Callable[[], Any]) -> Any:
        """`request()`'s answer from this side, asked once; an EndpointError (or an answer that does not parse,
        ValueError) is returned, not raised, so the checks compare failures too."""
        answers = self.state.setdefault(side.role, {})
        if key not in answers:
            try:
                answers[key] = request()
            except (EndpointError, ValueError) as e:
                answers[key] = e if isinstance(e, EndpointError) else EndpointError(f"unreadable answer: {e}")
        return answers[key]

    def ask_both(self, key: str, request: Callable[[ServerSide], Any]) -> tuple[Any, Any]:
        """`request(side)` on both sides at once (two threads: the servers work in parallel, each its own client),
        each answer as `ask` keeps it."""
        with ThreadPoolExecutor(2) as pool:
            ref, cand = (pool.submit(self.ask, side, key, lambda s=side: request(s)) for side in self.sides)
            return ref.result(), cand.result()

    def prompts(self) -> list[str]:
        return prompt_texts(self.options.prompts)

    def greedy(self, text: str) -> tuple[Generation | EndpointError, Generation | EndpointError]:
        """Both sides' greedy chat answers to `text`, with top logprobs."""
        options = self.options
        return self.ask_both(f"greedy {text}", lambda side: side.surface.chat(
            chat_messages(text), max_tokens=options.max_tokens, top_logprobs=options.top_logprobs))

    def greedy_pairs(self) -> list[tuple[str, Generation | EndpointError, Generation | EndpointError]]:
        return [(text, *self.greedy(text)) for text in self.prompts()]
