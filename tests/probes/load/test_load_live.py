"""`probe load` against real servers on 127.0.0.1 serving SmolLM2-135M-Instruct (Q4_1 GGUF, also the reference):
llama.cpp's C++ llama-server with 4 slots and --metrics, and llama-cpp-python's server (one request at a time),
healthy and behind the fault proxy (tests/load_servers.py) for the faults no healthy server shows.

Each run is short (two levels, a few requests, 16 tokens). What they showed on the 2-core CI box is in
docs/load.md ("What it says on the live servers")."""
from __future__ import annotations

import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.load_probe import run_load_report
from probes.load import LoadOptions
from tests.assets import smollm2_gguf
from tests.endpoint_assets import LlamaServer
from tests.load_servers import FaultProxy, LlamaCppServer

pytestmark = [pytest.mark.assets, pytest.mark.slow]
LIVE = dict(concurrency=(1, 4), requests=4, max_tokens=8, duration_s=400, timeout_s=120, repeats=1)


@pytest.fixture(scope="module")
def gguf():
    return smollm2_gguf()


@pytest.fixture(scope="module")
def reference(gguf):
    return Reference.load(gguf)


@pytest.fixture(scope="module")
def llama_server(gguf):
    with LlamaCppServer(gguf, parallel=4) as server:
        yield server


def run(reference, url, **kw):
    return run_load_report(reference.path, url, LoadOptions(**{**LIVE, **kw}), reference=reference)


def severities(report, level="error"):
    return sorted({f.check for f in report.findings if f.severity.value == level})


def sane(levels):
    for lv in levels:
        assert lv["completed"] == lv["requests"], lv
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert lv[key]["p50"] <= lv[key]["p90"] <= lv[key]["p99"], (key, lv)


def test_llama_server_healthy_at_four_slots(reference, llama_server):
    # enough requests and tokens that decoding, which the 4 slots batch, outweighs the prompts' prefill (one
    # thread does both): with 4 requests of 8 tokens the tokens/s comparison was prefill noise
    """Cost: ~110 s on the shared 2-core box (load average ~10): two load levels of 8 requests x 32 tokens, each
    answer checked against the reference; the tokens/s comparison needs decoding to outweigh prefill"""
    report = run(reference, llama_server.url, requests=8, max_tokens=32)
    assert severities(report) == [], [(f.check, f.message) for f in report.findings]
    levels = report.load["levels"]
    sane(levels)
    assert levels[1]["output_tokens_per_s"] > levels[0]["output_tokens_per_s"], levels   # 4 slots batch
    assert report.load["metrics"]["scrapes"] >= 2 and "llamacpp:requests_processing" in report.load["metrics"]["last"]
    classes = report.load["correctness"]["classes"]
    # slot nondeterminism (llama.cpp #7052), where it shows, must be a near tie, not corruption
    assert {c["kind"] for c in classes} <= {"match", "near-tie"}, classes
    assert report.findings_for("EPT110")[0].evidence["reference"], "the solo answers were checked against the reference"


@pytest.mark.parametrize("fault, check, severity", [("crosstalk", "EPT113", "error"), ("corrupt", "EPT112", "error"),
                                                    ("5xx", "EPT102", "error"), ("drop", "EPT102", "error")])
def test_llama_server_behind_a_faulty_proxy(reference, llama_server, fault, check, severity):
    """Cost: ~15-40 s each on the shared 2-core box (load average ~10): a short load run (6 requests) through the
    proxy; the correctness runs also score every answer with the reference"""
    with FaultProxy(llama_server.url, fault) as proxy:
        report = run(reference, proxy.url, correctness=fault in ("crosstalk", "corrupt"), requests=6)
    assert proxy.injected
    assert check in severities(report, severity), [(f.check, f.message) for f in report.findings]


def test_llama_server_preemption_storm_and_cliff_behind_the_proxy(reference, llama_server):
    """Cost: ~30 s on the shared 2-core box (load average ~10): two proxy runs; the cliff fault sleeps 0.1 s x
    in-flight^2 on purpose"""
    with FaultProxy(llama_server.url, "preemption") as proxy:
        report = run(reference, proxy.url, correctness=False, requests=6)
    assert "EPT105" in severities(report, "warning")
    with FaultProxy(llama_server.url, "cliff") as proxy:
        report = run(reference, proxy.url, correctness=False, requests=6)
    assert "EPT104" in severities(report, "warning")


def test_llama_cpp_python_queues_and_without_interrupts_has_no_error(reference, gguf, live_server):
    """Cost: ~75 s on the shared 2-core box (load average ~10): llama-cpp-python answers one request at a time, so
    the concurrency-4 level queues by design"""
    server = live_server(LlamaServer, gguf, "--interrupt_requests", "False")
    report = run(reference, server.url)
    assert severities(report) == [], [(f.check, f.message) for f in report.findings]
    levels = report.load["levels"]
    sane(levels)
    assert levels[1]["ttft_ms"]["p50"] > 2 * levels[0]["ttft_ms"]["p50"]     # one at a time: the others queue
    assert "no /metrics" in report.findings_for("EPT101")[0].evidence["metrics"]


def test_llama_cpp_python_default_interrupts_drop_concurrent_streams(reference, gguf, live_server):
    """Cost: ~12 s on the shared 2-core box (load average ~10): one short load run on the shared server"""
    server = live_server(LlamaServer, gguf)      # the healthy server the endpoint files share (tests/server_pool.py)
    report = run(reference, server.url, correctness=False)
    finding = report.findings_for("EPT102")[0]
    assert finding.severity.value == "error" and "dropped streams" in finding.message, finding.message
    assert report.load["levels"][1]["errors"]["dropped_streams"] > 0
    assert report.load["levels"][0]["errors"]["total"] == 0        # alone, nothing is interrupted


def test_llama_server_with_one_slot_defers_requests(reference, gguf, live_server):
    """EPT106 on a real server's own metrics: with one slot under concurrency 4, llama.cpp defers requests
    (llamacpp:requests_deferred, a gauge the scraper reads once a second); llama.cpp has no queue-time histogram,
    so the finding is a note naming the levels, never a warning.
    Cost: ~40 s on the shared 2-core box (load average ~10): 8 requests through one slot, so that the deferred gauge
    is seen by the once-a-second scraper"""
    server = live_server(LlamaCppServer, gguf, parallel=1, ctx=2048)     # shared with the competence probes
    report = run(reference, server.url, correctness=False, requests=8, max_tokens=16)
    (finding,) = report.findings_for("EPT106")
    assert finding.severity.value == "info" and "waited for a free slot at concurrency 4" in finding.message
    rows = {row["level"]: row for row in finding.evidence["levels"]}
    assert rows["concurrency 4"]["deferred_max"] >= 1 and not rows["concurrency 1"].get("deferred_max")
