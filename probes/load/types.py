"""Plain data of a load run: one streamed request (Sample), one load level, probe answers, metric scrapes."""
from __future__ import annotations

from dataclasses import dataclass, field

from probes.endpoint.types import TokenLogprob

# what became of one request
OK, HTTP_ERROR, DROPPED, TIMEOUT, TRANSPORT, CANCELLED, CUT = (
    "ok", "http_error", "dropped", "timeout", "transport", "cancelled", "cut")
# outcomes that are the server's fault; CANCELLED (we closed it on purpose) and CUT (our time limit) are not
FAILURES = (HTTP_ERROR, DROPPED, TIMEOUT, TRANSPORT)


@dataclass
class Sample:
    """One streamed request as the client saw it (times in seconds from the run's start or the request's)."""
    prompt_id: str
    started: float                       # seconds since the level began
    outcome: str = OK
    status: int | None = None            # HTTP status
    error: str = ""
    ttft_s: float | None = None          # first content chunk
    e2e_s: float | None = None           # last byte
    chunk_times: list[float] = field(default_factory=list)   # arrival of each content chunk, from send
    output_tokens: int = 0               # usage.completion_tokens when the server sends it, else content chunks
    text: str = ""
    finish_reason: str | None = None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (vLLM/AIPerf definition); None for fewer than 2 tokens."""
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]


@dataclass
class Level:
    """One load level: closed loop at `concurrency` or open loop (Poisson) at `rate` requests/s."""
    concurrency: int | None = None
    rate: float | None = None
    requests: int = 0                    # asked for
    wall_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    peak_in_flight: int = 0              # the most requests this level had open at once
    delayed_arrivals: int = 0            # open loop: arrivals that waited for a free slot (in-flight cap)
    cut_short: bool = False              # the total time limit ended the level

    @property
    def label(self) -> str:
        return f"concurrency {self.concurrency}" if self.rate is None else f"rate {self.rate:g}/s"


@dataclass
class ProbeAnswer:
    """One greedy probe answer with top logprobs, alone or under background load."""
    probe: str
    phase: str                           # "solo" or "load"
    text: str = ""
    tokens: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    error: str = ""


@dataclass
class Scrape:
    """One GET /metrics: seconds since the run began, the phase (level label) and every sample summed over labels."""
    t: float
    phase: str
    values: dict[str, float]
