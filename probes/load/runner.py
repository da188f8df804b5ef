"""Load levels: closed loop (c clients, each sends its next request when the last one ends) and open loop
(Poisson arrivals at a rate, capped at a number of requests in flight). Threads over one httpx client.

Everything is bounded: the requests of a level, the requests in flight (never more than asked), every request's
time and the run's deadline, after which no request is sent and the open ones are closed (marked CUT).
"""
from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import dataclass, field

import httpx

from probes.load.stream import chat_body, stream_request
from probes.load.types import Level, Sample
from probes.load.workload import Job


@dataclass
class Target:
    """Where and how to send: the server root, model name, request extras (server switches) and limits."""
    root: str
    model: str | None
    max_tokens: int
    timeout_s: float
    deadline: float                      # time.monotonic() after which nothing is sent
    extra: dict = field(default_factory=dict)
    api_key: str | None = None

    def client(self, connections: int, transport=None) -> httpx.Client:
        headers = {"User-Agent": "llmdoctor-load-probe"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.Client(base_url=self.root, headers=headers, limits=limits, transport=transport,
                            trust_env=False, follow_redirects=False)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()


class InFlight:
    """Counts open requests and remembers the peak (what the report says about 'never more than asked')."""

    def __init__(self):
        self._lock = threading.Lock()
        self.now = self.peak = 0

    def __enter__(self):
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc):
        with self._lock:
            self.now -= 1


def send(http: httpx.Client, target: Target, job: Job, started: float, counter: InFlight,
         max_tokens: int | None = None) -> Sample:
    sample = Sample(job.prompt_id, round(time.monotonic() - started, 6))
    body = chat_body(target.model, job.prompt, max_tokens or target.max_tokens, target.extra)
    with counter:
        return stream_request(http, body, sample, timeout_s=target.timeout_s, deadline=target.deadline,
                              cancel_after=job.cancel_after)


def closed_loop(target: Target, jobs: list[Job], concurrency: int, transport=None) -> Level:
    """Send `jobs` with `concurrency` clients in a closed loop."""
    level = Level(concurrency=concurrency, requests=len(jobs))
    queue, lock, counter = iter(jobs), threading.Lock(), InFlight()
    started = time.monotonic()
    with target.client(concurrency, transport) as http:
        def worker():
            while target.left_s() > 0.05:
                with lock:
                    job = next(queue, None)
                if job is None:
                    return
                sample = send(http, target, job, started, counter)
                with lock:
                    level.samples.append(sample)
        _run_threads(worker, concurrency)
    return _finish(level, started, counter, target)


def open_loop(target: Target, jobs: list[Job], rate: float, max_in_flight: int, seed: int = 0,
              transport=None) -> Level:
    """Send `jobs` at Poisson arrivals of `rate` per second, at most `max_in_flight` open at once (an arrival
    that finds them all busy waits, and is counted in delayed_arrivals)."""
    level = Level(rate=rate, requests=len(jobs))
    rng, lock, counter = random.Random(seed), threading.Lock(), InFlight()
    slots = threading.BoundedSemaphore(max_in_flight)
    threads = []
    started = time.monotonic()
    with target.client(max_in_flight, transport) as http:
        def one(job: Job):
            try:
                sample = send(http, target, job, started, counter)
                with lock:
                    level.samples.append(sample)
            finally:
                slots.release()
        due = started
        for job in jobs:
            due += rng.expovariate(rate)
            wait = min(due - time.monotonic(), target.left_s())
            if wait > 0:
                time.sleep(wait)
            if target.left_s() <= 0.05:
                break
            if not slots.acquire(blocking=False):
                level.delayed_arrivals += 1
                if not slots.acquire(timeout=max(target.left_s(), 0.01)):
                    break
            thread = threading.Thread(target=one, args=(job,), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(max(target.left_s(), 0) + target.timeout_s + 5)
    return _finish(level, started, counter, target)


class Background:
    """Background traffic for the correctness phase: `workers` clients cycling through `jobs` until stop()."""

    def __init__(self, target: Target, jobs: list[Job], workers: int, max_requests: int, transport=None):
        self.target, self.jobs, self.workers, self.max_requests = target, jobs, workers, max_requests
        self.samples: list[Sample] = []
        self.counter = InFlight()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._jobs = itertools.cycle(enumerate(jobs))
        self._threads: list[threading.Thread] = []
        self._http = target.client(workers, transport)
        self._sent = 0
        self.started = time.monotonic()

    def start(self) -> "Background":
        for _ in range(self.workers):
            thread = threading.Thread(target=self._work, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _work(self) -> None:
        while not self._stop.is_set() and self.target.left_s() > 0.05:
            with self._lock:
                if self._sent >= self.max_requests:
                    return
                self._sent += 1
                _, job = next(self._jobs)
            sample = send(self._http, self.target, job, self.started, self.counter)
            with self._lock:
                self.samples.append(sample)

    def busy(self) -> bool:
        return self.counter.now > 0

    def stop(self) -> list[Sample]:
        self._stop.set()
        for thread in self._threads:
            thread.join(max(self.target.left_s(), 0) + self.target.timeout_s + 5)
        self._http.close()
        return self.samples


def _run_threads(worker, n: int) -> None:
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _finish(level: Level, started: float, counter: InFlight, target: Target) -> Level:
    level.wall_s = time.monotonic() - started
    level.peak_in_flight = counter.peak
    level.cut_short = target.left_s() <= 0.05 and len(level.samples) < level.requests
    level.samples.sort(key=lambda s: s.started)
    return level
