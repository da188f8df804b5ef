"""EndpointInputs: the reference, the server connection and every server answer, each asked at most once.

The endpoint checks receive this instead of the model CheckInputs; `require(("endpoint",))` is what the
runner calls before each check. A server that could not be reached, or a reference that could not be loaded,
makes the checks needing them "skipped" with the reason (EPT001 reports the reachability itself).
"""
from __future__ import annotations

import functools
import time
from typing import Any, Callable

from checks.shared.chat.conversations import CONVERSATIONS   # the conversation shapes the EPT checks send
from checks.catalogue.inputs import ResourceError, remembered
from checks.endpoint.reference import Reference
from checks.catalogue.registry import Problem, Skip
from probes.endpoint import Connection, EndpointError

# plain texts where pre-tokenizers disagree: digits, contractions, whitespace runs, punctuation, non-ASCII
RAW_TEXTS = (
    "Hello world! It's 2024, and I've got 12345 apples.",
    "   leading spaces,\ttabs\nand newlines\n\n  end",
    "def f(x):\n    return x**2 + 3.14159  # comment",
    "naïve café — “quotes” 日本語 🤖 ½",
    "don't won't they're I'm we'll she'd",
    "1234567890 100,000.00 $5.99 3rd 21st ...!!??",
)
COMPLETION_PROMPT = "The three primary colours are red, blue and"
STOP_CONVERSATION = "no system"


class EndpointInputs:
    def __init__(self, url: str, reference: Reference | ResourceError, connection: Connection | EndpointError,
                 *, max_tokens: int = 48, top_logprobs: int = 5, context_tokens: int | None = None):
        self.url = url
        self._reference = reference
        self._connection = connection
        self.max_tokens = max_tokens
        self.context_tokens = context_tokens    # --context N: how far EPT121-EPT123 read the server
        self.top_logprobs = top_logprobs
        self.state: dict[str, Any] = {}
        self._answers: dict[str, Any] = {}
        self.total_build_seconds = 0.0          # loading the reference engine (the runner keeps it out of check times)

    @property
    def reference(self) -> Reference:
        if isinstance(self._reference, ResourceError):
            raise self._reference
        return self._reference

    @property
    def connection(self) -> Connection:
        if isinstance(self._connection, EndpointError):
            raise ResourceError("endpoint", f"the server could not be reached: {self._connection}")
        return self._connection

    @property
    def connection_error(self) -> EndpointError | None:
        return self._connection if isinstance(self._connection, EndpointError) else None

    @property
    def surface(self):
        return self.connection.surface

    def require(self, needs: tuple[str, ...]) -> None:
        if "endpoint" in needs and self._connection is None:
            raise ResourceError("endpoint", "no endpoint given")
        if any(n in needs for n in ("tokenizer", "config", "engine")):
            self.reference

    def ask(self, key: str, request: Callable[[], Any]) -> Any:
        """The server's answer to `request`, asked once; an EndpointError is remembered and raised again."""
        return remembered(self._answers, key, request, EndpointError)

    def engine(self):
        started = time.perf_counter()
        try:
            return self.reference.engine()
        except Exception as e:  # the reference model cannot be loaded into the engine: skip, with the reason
            raise ResourceError("engine", f"{type(e).__name__}: {' '.join(str(e).split())}") from None
        finally:
            self.total_build_seconds += time.perf_counter() - started

    # -- answers several checks share ------------------------------------------------------------
    def stop_answer(self):
        """The greedy chat answer to a short question, with logprobs (stopping and numerics read it)."""
        messages = CONVERSATIONS[STOP_CONVERSATION]
        return self.ask("chat:stop", lambda: self.surface.chat(messages, max_tokens=self.max_tokens,
                                                               top_logprobs=self.top_logprobs))

    def completion_answer(self):
        return self.ask("completion", lambda: self.surface.completion(COMPLETION_PROMPT, max_tokens=16,
                                                                      logprobs=self.top_logprobs))

    def tokenize(self, text: str) -> list[int] | None:
        return self.ask(f"tokenize:{text}", lambda: self.surface.tokenize(text))


def asks_server(func: Callable) -> Callable:
    """A server error in the middle of a check is a finding with the HTTP error, not a crash; the findings the
    check made before the error are kept beside it. The prober's own limit running out (a request's timeout, the
    probe's deadline or request count) is no fault of the server: the check skips naming the option that raises
    the limit, or, when it found something first, keeps that with an info line saying where it stopped."""
    @functools.wraps(func)
    def wrapper(ctx):
        found = []
        try:
            for problem in func(ctx) or []:
                found.append(problem)
        except EndpointError as e:
            if e.limit:
                found.append(gave_up(e, found))
            else:
                found.append(Problem(f"the server failed a probe request: {e}", severity="warning",
                                     evidence={"route": e.route, "status": e.status, "error": str(e),
                                               "findings_before": len(found)},
                                     hint="check the server log for this request; rerun when the server is healthy"))
        return found
    return wrapper


def gave_up(e: EndpointError, found: list[Problem]) -> Problem:
    """The info line of a check the prober stopped (Skip when it had found nothing yet)."""
    text = f"the probe stopped waiting ({e}): the prober's limit, not a fault of the server; raise {e.limit}"
    if not found:
        raise Skip(text)
    return Problem(text, severity="info", evidence={"route": e.route, "error": str(e), "limit": e.limit,
                                                    "findings_before": len(found)})
