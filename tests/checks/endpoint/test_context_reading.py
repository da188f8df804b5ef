"""`probe endpoint URL --context N` (EPT121-EPT123) against llama.cpp's own llama-server on
SmolLM2-135M-Instruct's Q4_1 GGUF: the healthy server reads the planted words at every distance (clean, with
and without --model); one started with --rope-freq-base 1000 (SmolLM2's is 100000) is shown losing them
through its raw API (from 64 tokens back on: with --model the checkpoint reads them all, so the distance is
named); a proxy that cuts the middle out of long prompts is caught by the prompt counts; a server with a
smaller context (-c 512) than asked is reported with its real limit. llama-server has no prompt logprobs: the
greedy route, named. llama-cpp-python's server (the one the endpoint files share) scores prompts: with --model it
is read by the echo route (clean, its copy ratios beside the reference's on the same ids), and behind a proxy
cutting the middle of long prompts the echo shows the cut (read to 512 tokens: its echo is slow, ECHO_TOKENS).

Read to 512 tokens, 1024 for the cut and the smaller window (4096 only in benchmarks/context_cost.py). Servers
come from the session's pool (started once, stopped with their process group at the session's end). Cost: one
probe without --model took 184 s at 2048 tokens on the 2-core box under a load of ~12 (6 prompts to a one-thread
server); the idle suite's healthy pair (without and with --model) 55 s at 1024."""
from __future__ import annotations


import pytest

from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from probes.endpoint import context_probe
from probes.endpoint.context_probe import (ECHO, GREEDY, MIN_MATCHED, chars_per_token, read_back,
                                           retrievals)
from tests import endpoint_assets
from tests.checks.endpoint.cut_proxy import MiddleCut
from tests.load_servers import LlamaCppServer

pytestmark = [pytest.mark.assets, pytest.mark.slow]
TOKENS = 512             # the healthy and rope-base readings: the broken base loses words from 64 tokens back
LIMIT_TOKENS = 1024      # the cut and the smaller window: prompts past the proxy's 2000 characters and -c 512
ECHO_TOKENS = 512        # llama-cpp-python's echo costs ~0.1 s per prompt token (its Python logprob loop)
IDS = ["EPT121", "EPT122", "EPT123"]


@pytest.fixture(scope="session")
def context_servers(smollm2_gguf, live_server):
    """servers(name) -> a started server (healthy, rope_base, small_ctx, middle_cut): llama-servers from the
    session's pool (tests/server_pool.py: started once, registered, stopped with their process group at the end)."""
    args = {"healthy": ((), 1024), "rope_base": (("--rope-freq-base", "1000"), 1024), "small_ctx": ((), 512)}
    proxies: dict = {}

    def get(name):
        if name == "middle_cut":
            if name not in proxies:
                proxies[name] = MiddleCut(get("healthy").url)
            return proxies[name]
        extra, ctx = args[name]
        return live_server(LlamaCppServer, smollm2_gguf, *extra, parallel=1, ctx=ctx)
    yield get
    for proxy in proxies.values():
        proxy.stop()


@pytest.fixture(scope="module")
def reference(smollm2_reference):
    return smollm2_reference          # loaded once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def echo_server(live_server, smollm2_gguf):
    """llama-cpp-python's server, the one the endpoint files share (tests/server_pool.py): it scores prompts."""
    return live_server(endpoint_assets.LlamaServer, smollm2_gguf)


def probe(url, reference=None, tokens=TOKENS):
    report = run_endpoint(reference.path if reference else None,
                          EndpointOptions(url, timeout_s=600, deadline_s=3600, context=tokens),
                          reference=reference, select=IDS)
    crashed = [c for c in report.checks if c.status == "crashed"]
    assert not crashed, crashed
    return report


def problems(report):
    return {f.check: f for f in report.findings if f.severity.value in ("warning", "error")}


def raw_reading(url) -> list[int]:
    """Words read back at each distance through the raw API (the outside view of the fault)."""
    from probes.endpoint import Budget, EndpointClient, connect
    client = EndpointClient(url, None, Budget(max_requests=20, deadline_s=3600, timeout_s=600))
    try:
        surface = connect(client, None).surface
        return [read_back(r.expected, surface.completion(r.prompt, max_tokens=12).text)
                for r in retrievals(TOKENS, chars_per_token(surface))]
    finally:
        client.close()


def test_healthy_server_reads_every_distance(context_servers, reference):
    """Without and with --model (the reference engine's own greedy answers at each distance): 55 s at 1024 tokens
    in the idle suite, about half at 512."""
    url = context_servers("healthy").url
    for ref in (None, reference):
        report = probe(url, ref)
        assert not problems(report), [f.message for f in report.findings]
        claims = next(f for f in report.findings if f.check == "EPT121")
        assert claims.evidence["max_context"] == 1024
        assert "EPT122" in [c.id for c in report.checks if c.status == "passed"]
        reading = report.findings_for("EPT122")[0].evidence      # no prompt logprobs: the greedy route, named
        assert reading["route"] == GREEDY and "llama.cpp's server returns no prompt logprobs" in reading["why_greedy"]


def test_wrong_rope_base_is_caught_with_the_distance(context_servers, reference):
    """The raw reading, then the probe with --model on the broken server: ~41 s on 2 cores."""
    url = context_servers("rope_base").url
    words = raw_reading(url)
    assert min(words[1:]) < MIN_MATCHED, words      # the raw API: the planted words are lost far out
    found = problems(probe(url, reference))
    assert "EPT122" in found and found["EPT122"].severity.value == "error"
    assert found["EPT122"].evidence["fails_at"] in [r["distance"] for r in found["EPT122"].evidence["server"]]
    assert f"stops reading at {found['EPT122'].evidence['fails_at']} tokens" in found["EPT122"].message


def test_a_proxy_cutting_the_middle_is_caught(context_servers):
    found = problems(probe(context_servers("middle_cut").url, tokens=LIMIT_TOKENS))
    assert "EPT123" in found and "cut on the way" in found["EPT123"].message, found


def test_a_smaller_context_is_reported_with_its_limit(context_servers):
    found = problems(probe(context_servers("small_ctx").url, tokens=LIMIT_TOKENS))
    assert "EPT123" in found, found
    assert found["EPT123"].evidence.get("limit") == 512, found["EPT123"].message
    # the refusals are the server's limit, not a reading stopped short: what fits in 512 is read (EPT122 quiet)
    rows = found["EPT123"].evidence["server"]
    accepted = [r for r in rows if "error" not in r]
    assert accepted and all(r["matched"] >= MIN_MATCHED for r in accepted) and "EPT122" not in found, rows
    assert all("512" in r["error"] for r in rows if "error" in r), rows


def test_llama_cpp_python_is_read_through_its_prompt_logprobs(echo_server, reference):
    """The echo route: one scored prompt per distance, nothing generated; the reference scores the same token ids
    and the copy ratios agree (Q4_1 vs float32). Cost: 26-41 s at a load of ~4.5, 105 s at ~8 (~600 echoed tokens;
    docs/context.md)."""
    report = probe(echo_server.url, reference, ECHO_TOKENS)
    assert not problems(report), [f.message for f in report.findings]
    reading = report.findings_for("EPT122")[0]
    assert reading.evidence["route"] == ECHO and "route: prompt logprobs (echo)" in reading.message
    served, ref = reading.evidence["server"], reading.evidence["reference"]
    assert len(served) == 3 and served[-1]["distance"] > 128
    for s, r in zip(served, ref):
        assert s["prompt_tokens"] == r["prompt_tokens"]                   # the same ids, the BOS text included
        assert s["copy_ratio"] < 0.2 and abs(s["copy_ratio"] - r["copy_ratio"]) < 0.05
        assert s["first_copy_loss"] > 5 > 1 > s["second_copy_loss"]


def test_a_proxy_cutting_the_middle_is_caught_on_the_echo_route(echo_server, reference, monkeypatch):
    """The near control and one far distance only (the cut needs no more; each echoed token costs ~0.1 s here).
    Cost: 20-29 s at a load of ~4.5."""
    monkeypatch.setattr(context_probe, "FRACTIONS", (1.0,))
    proxy = MiddleCut(echo_server.url, over=1000)
    try:
        found = problems(probe(proxy.url, reference, ECHO_TOKENS))
    finally:
        proxy.stop()
    cut = found["EPT123"]
    assert cut.evidence["route"] == ECHO and "does not spell the text sent" in cut.message
    assert f"planting words {cut.evidence['distance']} tokens back" in cut.message
    assert cut.evidence["distance"] > 64            # the near prompt (under 1000 characters) reaches it whole


def test_wrong_rope_base_is_caught_on_the_echo_route(live_server, smollm2_gguf, reference):
    """llama-cpp-python with --rope_freq_base 1000 (SmolLM2's is 100000): its copy ratios (0.08-0.20) pass the
    bound, but its second showing costs 1.3-1.6 nats/token more than the checkpoint's on the same ids from 146
    tokens back: named. Cost: 29-55 s (a server of its own, ~600 echoed tokens)."""
    server = live_server(endpoint_assets.LlamaServer, smollm2_gguf, "--rope_freq_base", "1000")
    found = problems(probe(server.url, reference, ECHO_TOKENS))
    wrong = found["EPT122"]
    assert wrong.severity.value == "error" and wrong.evidence["route"] == ECHO
    fails = wrong.evidence["fails_at"]
    served = {r["distance"]: r for r in wrong.evidence["server"]}
    ref = {r["distance"]: r for r in wrong.evidence["reference"]}
    assert served[fails]["second_copy_loss"] - ref[fails]["second_copy_loss"] > 0.75 > 0.5 > ref[fails]["copy_ratio"]
    assert f"stops reading at {fails} tokens back" in wrong.message and "on the same ids" in wrong.message
