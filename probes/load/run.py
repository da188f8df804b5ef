"""One load run against a connected server: latency levels, then correctness alone and under load, with
/metrics scraped throughout. Bounded by `LoadOptions.duration_s` in total; what did not fit is said, not dropped.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from probes.load.correctness import solo, under_load
from probes.load.metrics import Scraper
from probes.load.runner import Target, closed_loop, open_loop
from probes.load.types import TRANSPORT, Level, ProbeAnswer, Sample, Scrape
from probes.load.workload import latency_prompts

# request switches per server kind: fixed output lengths where the server has the switch (vLLM, llama.cpp)
LOAD_EXTRA = {"vllm": {"ignore_eos": True}, "llama.cpp": {"ignore_eos": True}}


@dataclass
class LoadOptions:
    concurrency: tuple[int, ...] = (1, 4, 8)
    requests: int = 32                  # per level
    rates: tuple[float, ...] = ()       # open-loop levels, requests/s (Poisson)
    max_tokens: int = 64
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    duration_s: float = 300.0           # the whole run, hard
    timeout_s: float = 60.0             # one request
    repeats: int = 3                    # each probe, alone and under load
    top_logprobs: int = 5
    correctness: bool = True

    @property
    def max_in_flight(self) -> int:
        return max(self.concurrency or (1,))


@dataclass
class LoadRun:
    levels: list[Level] = field(default_factory=list)
    scrapes: list[Scrape] = field(default_factory=list)
    metrics_error: str | None = None
    solo: list[ProbeAnswer] = field(default_factory=list)
    loaded: list[ProbeAnswer] = field(default_factory=list)
    background: list[Sample] = field(default_factory=list)
    background_workers: int = 0
    probe_workers: int = 0
    skipped: dict[str, str] = field(default_factory=dict)   # phase -> why it did not run
    wall_s: float = 0.0


def run_load(surface, options: LoadOptions, *, api_key: str | None = None, transport=None) -> LoadRun:
    started = time.monotonic()
    deadline = started + options.duration_s
    client = surface.client
    extra = LOAD_EXTRA.get(surface.kind, {})
    target = Target(client.root, surface.model, options.max_tokens, options.timeout_s, deadline, extra, api_key)
    result = LoadRun()
    scraper_http = target.client(1, transport)
    scraper = Scraper(scraper_http, 1.0, deadline).start()
    try:
        _latency(target, options, result, scraper, transport)
        samples = [s for level in result.levels for s in level.samples]
        if samples and all(s.outcome == TRANSPORT for s in samples):
            result.skipped["correctness"] = "the server stopped accepting connections during the latency levels"
        elif options.correctness:
            _correctness(surface, target, options, result, scraper, transport)
        else:
            result.skipped["correctness"] = "not asked"
    finally:
        result.scrapes = scraper.stop()
        result.metrics_error = scraper.error if not result.scrapes else None
        scraper_http.close()
        result.wall_s = time.monotonic() - started
    return result


def _latency(target: Target, options: LoadOptions, result: LoadRun, scraper: Scraper, transport) -> None:
    jobs = latency_prompts(options.requests)
    for c in options.concurrency:
        if target.left_s() <= 1:
            result.skipped[f"concurrency {c}"] = f"the {options.duration_s:g} s time limit was reached"
            continue
        scraper.phase = f"concurrency {c}"
        result.levels.append(closed_loop(target, jobs, c, transport))
        scraper.checkpoint()
    for rate in options.rates:
        if target.left_s() <= 1:
            result.skipped[f"rate {rate:g}/s"] = f"the {options.duration_s:g} s time limit was reached"
            continue
        scraper.phase = f"rate {rate:g}/s"
        result.levels.append(open_loop(target, jobs, rate, options.max_in_flight, transport=transport))
        scraper.checkpoint()
    scraper.phase = "idle"


def _correctness(surface, target: Target, options: LoadOptions, result: LoadRun, scraper: Scraper,
                 transport) -> None:
    if target.left_s() <= 2:
        result.skipped["correctness"] = f"the {options.duration_s:g} s time limit was reached"
        return
    scraper.phase = "probes alone"
    result.solo = solo(surface, options.repeats, options.max_tokens, options.top_logprobs, target.deadline)
    cap = options.max_in_flight
    if cap < 2:
        result.skipped["correctness under load"] = "needs a concurrency of at least 2 (one probe + background)"
        return
    if target.left_s() <= 2:
        result.skipped["correctness under load"] = f"the {options.duration_s:g} s time limit was reached"
        return
    # the probes and the background share the largest concurrency asked for: never more in flight than that
    result.probe_workers = max(1, min(cap // 2, 3))
    result.background_workers = cap - result.probe_workers
    scraper.phase = "probes under load"
    result.loaded, result.background = under_load(surface, target, options.repeats, options.max_tokens,
                                                  options.top_logprobs, result.background_workers,
                                                  result.probe_workers, transport)
    scraper.checkpoint()
    scraper.phase = "idle"
