"""EPT106 (queueing dominating TTFT) end to end: a proxy in front of the fake server admits a few requests at a
time, holds the others in a queue, and exposes the queue times it measured as vLLM's
vllm:request_queue_time_seconds histogram (so the histogram is recorded from what happened, consistent by
construction). Admitting one request at a time under concurrency 4, the queue is most of the TTFT the client
measures: a warning. Admitting more than the client sends, nobody waits: a note, no warning."""
from __future__ import annotations

import threading
import time

from llmdoctor.run.load_probe import run_load_report
from probes.load import LoadOptions
from tests.load_servers import FaultProxy, _ProxyHandler

BOUNDS = (0.005, 0.05, 0.5, 5.0)          # the histogram's finite bucket bounds, in seconds
SMALL = dict(concurrency=(1, 4), requests=8, max_tokens=8, duration_s=60, timeout_s=10, repeats=2, correctness=False)


class QueueingProxy(FaultProxy):
    def __init__(self, upstream: str, admit: int):
        super().__init__(upstream)
        self.gate = threading.Semaphore(admit)
        self.waits: list[float] = []        # seconds each request waited at the gate
        self.waiting = 0
        self.handler = _QueueingHandler

    def metrics(self) -> str:
        with self.lock:
            waits, waiting = list(self.waits), self.waiting
        labels = 'model_name="fake"'
        lines = ["# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{labels}}} {waiting}",
                 "# TYPE vllm:request_queue_time_seconds histogram"]
        for bound in (*BOUNDS, "+Inf"):
            below = sum(1 for w in waits if bound == "+Inf" or w <= bound)
            lines.append(f'vllm:request_queue_time_seconds_bucket{{le="{bound}",{labels}}} {below}')
        lines += [f"vllm:request_queue_time_seconds_count{{{labels}}} {len(waits)}",
                  f"vllm:request_queue_time_seconds_sum{{{labels}}} {sum(waits)}"]
        return "\n".join(lines) + "\n"


class _QueueingHandler(_ProxyHandler):
    def do_GET(self):
        if self.path == "/metrics":
            return self._plain(self.owner.metrics())
        return super().do_GET()

    def do_POST(self):
        o = self.owner
        with o.lock:
            o.waiting += 1
        start = time.perf_counter()
        with o.gate:
            with o.lock:
                o.waiting -= 1
                o.waits.append(time.perf_counter() - start)
            super().do_POST()


def queueing_finding(model, url):
    report = run_load_report(model, url, LoadOptions(**SMALL))
    (finding,) = report.findings_for("EPT106")
    return finding


def test_queue_dominating_ttft_is_a_warning(model, fake):
    with QueueingProxy(fake.url, admit=1) as proxy:
        finding = queueing_finding(model, proxy.url + "/v1")
    assert finding.severity.value == "warning" and "queueing dominates TTFT at concurrency 4" in finding.message
    rows = {row["level"]: row for row in finding.evidence["levels"]}
    assert rows["concurrency 4"]["queue_share"] > 0.5 > rows["concurrency 1"]["queue_share"]


def test_no_queue_is_no_warning(model, fake):
    with QueueingProxy(fake.url, admit=8) as proxy:
        finding = queueing_finding(model, proxy.url + "/v1")
    assert finding.severity.value == "info" and "small part of TTFT" in finding.message
    assert all(row["queue_share"] < 0.5 for row in finding.evidence["levels"])
