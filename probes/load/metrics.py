"""The server's own view while it is loaded: GET /metrics (Prometheus text) once a second, parsed with
prometheus_client's parser, each sample summed over its labels.

`SERVERS` names, per server, the series the load findings read (the first name present wins: metric names
moved between versions). A server without /metrics (llama-cpp-python, llama.cpp without --metrics) is said so.
"""
from __future__ import annotations

import threading
import time

import httpx

from probes.load.types import Scrape

# role -> candidate sample names, per server family (vLLM V1 and V0, llama.cpp --metrics, TGI, SGLang)
SERVERS = {
    "vllm": {"running": ["vllm:num_requests_running"], "waiting": ["vllm:num_requests_waiting"],
             "kv_usage": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
             "preemptions": ["vllm:num_preemptions_total"],
             "queue_time": ["vllm:request_queue_time_seconds"], "ttft": ["vllm:time_to_first_token_seconds"],
             "prefix_hits": ["vllm:prefix_cache_hits_total"], "prefix_queries": ["vllm:prefix_cache_queries_total"]},
    "llama.cpp": {"running": ["llamacpp:requests_processing"], "waiting": ["llamacpp:requests_deferred"],
                  "kv_usage": ["llamacpp:kv_cache_usage_ratio"], "busy_slots": ["llamacpp:n_busy_slots_per_decode"],
                  "generated": ["llamacpp:tokens_predicted_total"], "prompt_tokens": ["llamacpp:prompt_tokens_total"]},
    "tgi": {"running": ["tgi_batch_current_size"], "waiting": ["tgi_queue_size"],
            "queue_time": ["tgi_request_queue_duration"], "e2e": ["tgi_request_duration"]},
    "sglang": {"running": ["sglang:num_running_reqs"], "waiting": ["sglang:num_queue_reqs"],
               "kv_usage": ["sglang:token_usage"], "preemptions": ["sglang:num_retracted_reqs"],
               "queue_time": ["sglang:queue_time_seconds"], "ttft": ["sglang:time_to_first_token_seconds"],
               "cache_hit_rate": ["sglang:cache_hit_rate"]},
}
PREFIXES = {"vllm:": "vllm", "llamacpp:": "llama.cpp", "tgi_": "tgi", "sglang:": "sglang"}


def parse(text: str) -> dict[str, float]:
    """Every sample name -> its value summed over label sets (histograms keep _sum/_count/_bucket names)."""
    from prometheus_client.parser import text_string_to_metric_families
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def server_family(values: dict[str, float]) -> str | None:
    for prefix, family in PREFIXES.items():
        if any(name.startswith(prefix) for name in values):
            return family
    return None


def series(scrapes: list[Scrape], family: str, role: str, suffix: str = "") -> list[tuple[float, str, float]]:
    """(t, phase, value) of the first candidate name of `role` present in the scrapes (suffix: _sum/_count)."""
    for name in SERVERS.get(family, {}).get(role, []):
        key = name + suffix
        points = [(s.t, s.phase, s.values[key]) for s in scrapes if key in s.values]
        if points:
            return points
    return []


class Scraper:
    """GET /metrics every `interval_s` on a thread until stop(); the phase label is set by the run."""

    def __init__(self, http: httpx.Client, interval_s: float = 1.0, deadline: float | None = None):
        self.http, self.interval_s, self.deadline = http, interval_s, deadline
        self.scrapes: list[Scrape] = []
        self.error: str | None = None
        self.phase = "idle"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.started = time.monotonic()

    def scrape_once(self) -> bool:
        try:
            response = self.http.get("/metrics", timeout=min(2.0, self.interval_s * 2))
        except httpx.HTTPError as e:
            self.error = f"GET /metrics: {type(e).__name__}: {e}"
            return False
        if response.status_code != 200:
            self.error = f"GET /metrics: HTTP {response.status_code}"
            return False
        try:
            values = parse(response.text)
        except Exception as e:  # not Prometheus text: the parser raises ValueError and friends
            self.error = f"GET /metrics: not Prometheus text ({type(e).__name__}: {e})"
            return False
        self.scrapes.append(Scrape(round(time.monotonic() - self.started, 3), self.phase, values))
        self.error = None
        return True

    def checkpoint(self) -> None:
        """One more scrape now, tagged with the current phase (at the end of a level: short levels get one too)."""
        if self.scrapes and (self.deadline is None or time.monotonic() < self.deadline):
            with self._lock:
                self.scrape_once()

    def start(self) -> "Scraper":
        if self.scrape_once():   # no /metrics at all: do not poll a route that is not there
            self._thread.start()
        return self

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(self.interval_s):
            if self.deadline is not None and time.monotonic() > self.deadline:
                return
            with self._lock:
                failures = 0 if self.scrape_once() else failures + 1
            if failures >= 5:
                return

    def stop(self) -> list[Scrape]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.checkpoint()
        return self.scrapes
