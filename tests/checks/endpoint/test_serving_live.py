"""Serving configurations that change answers, each built with the real llama-server flag on SmolLM2-135M-Instruct
(the Q4_1 GGUF; the reference is its own weights in float32): a quantized KV cache (`-ctk/-ctv q8_0|q4_0`, EPT043),
speculative decoding with a draft model (`-md`, EPT045; `--spec-synth-rates` accepts drafts unverified), the same
request alone and among others on a 4-slot server (`-np 4`, EPT044; the bf16 GGUF is not batch invariant on this
CPU build, the Q4_1 one is) and the prompt cache off once and on twice (EPT084: on the bf16 GGUF a warm cache moves
the logprobs, llama.cpp #28368). A real difference between a request alone and batched (another request's state
leaking in) is what no healthy llama-server does: a proxy plants it (tests/load_servers.py FaultProxy "corrupt").

Servers come from the session's pool (started once, stopped with their process group at the session's end); every
probe selects only the check it tests."""
from __future__ import annotations

import pytest

from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests import assets_gguf, endpoint_assets
from tests.assets import or_fail
from tests.load_servers import FaultProxy, LlamaCppServer

pytestmark = [pytest.mark.assets, pytest.mark.slow]
KV = {"f16": (), "q8_0": ("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"),
      "q4_0": ("-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on")}


def probe(reference, url, check_id):
    report = run_endpoint(reference.path, EndpointOptions(url, timeout_s=300, deadline_s=900), reference=reference,
                          select=[check_id])
    found = [f for f in report.findings if f.check == check_id]
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in found))
    return found


def severities(found) -> list[str]:
    return sorted(f.severity.value for f in found)


@pytest.fixture(scope="module")
def bf16_gguf():
    return or_fail(assets_gguf.smollm2_converted_gguf, "bf16")


@pytest.mark.parametrize("cache, expected", [("f16", "info"), ("q8_0", "info"), ("q4_0", "warning")])
def test_kv_cache_quantization_by_position(live_server, smollm2_gguf, smollm2_reference, cache, expected):
    """f16 and q8_0 stay near-equal to the reference along the passage; q4_0 is measurably off and changes the
    greedy output (the parting named with its distance and the reference's margin)."""
    server = live_server(LlamaCppServer, smollm2_gguf, *KV[cache], parallel=1, ctx=2048)
    (finding,) = probe(smollm2_reference, server.url, "EPT043")
    assert finding.severity.value == expected, finding.message
    windows = finding.evidence["windows"]
    assert windows and windows[0]["from_token"] == finding.evidence["prompt_tokens"]
    if cache == "q4_0":
        assert finding.evidence["parts"]["reference_gap_nats"] >= 0.5 and "greedy output changes" in finding.message
    else:
        assert finding.evidence["mean_kl_topk"] < 0.01 and finding.evidence["parts"] is None


@pytest.mark.parametrize("synthetic, expected", [(False, "info"), (True, "error")])
def test_speculative_decoding_keeps_greedy_output(live_server, smollm2_gguf, smollm2_reference, synthetic, expected):
    """A draft model (SmolLM2 requantized to q4_0) verified by the target leaves the greedy output the target's;
    with every draft accepted unverified (`--spec-synth-rates 1,1,1`, llama.cpp's benchmarking switch) it changes."""
    draft = or_fail(endpoint_assets.variant_gguf, "q4_0")
    extra = ("--spec-synth-rates", "1,1,1") if synthetic else ()
    server = live_server(LlamaCppServer, smollm2_gguf, "--spec-type", "draft-simple", "-md", str(draft), *extra,
                         parallel=1, ctx=2048)
    (finding,) = probe(smollm2_reference, server.url, "EPT045")
    assert finding.severity.value == expected, finding.message
    assert finding.evidence["draft_n"] > 0


def test_speculative_check_skips_without_drafts(live_server, smollm2_gguf, smollm2_reference):
    server = live_server(LlamaCppServer, smollm2_gguf, parallel=1, ctx=2048)
    report = run_endpoint(smollm2_reference.path, EndpointOptions(server.url, timeout_s=300),
                          reference=smollm2_reference, select=["EPT045"])
    (run,) = report.checks
    assert run.status == "skipped" and "draft_n" in run.reason


def test_batch_invariance_alone_and_among_others(live_server, smollm2_gguf, bf16_gguf, smollm2_reference):
    """Q4_1 on 4 slots: the same answer, the same logprobs. bf16 on 4 slots: the batch moves the numbers (the
    logprobs shift, or a near tie flips: reported with its margin, never an error)."""
    healthy = live_server(LlamaCppServer, smollm2_gguf, parallel=4)
    (same,) = probe(smollm2_reference, healthy.url, "EPT044")
    assert same.severity.value == "info" and same.evidence["max_logprob_shift"] == 0, same.message
    variant = live_server(LlamaCppServer, bf16_gguf, parallel=4, ctx=2048)
    found = probe(smollm2_reference, variant.url, "EPT044")
    assert severities(found) == ["info"]
    moved = found[0]
    assert (moved.evidence.get("max_logprob_shift") or 0) > 0 or "near tie" in moved.message, moved.message


def test_batch_invariance_sees_a_leaking_batch(live_server, smollm2_gguf, smollm2_reference):
    """A proxy that rewrites an answer only while another request is in flight: a real difference, an error."""
    healthy = live_server(LlamaCppServer, smollm2_gguf, parallel=4)
    with FaultProxy(healthy.url, "corrupt") as proxy:
        found = probe(smollm2_reference, proxy.url, "EPT044")
    assert severities(found) == ["error"] and "not a near tie" in found[0].message


def test_prompt_cache_warm_vs_cold_logprobs(live_server, smollm2_gguf, bf16_gguf, smollm2_reference):
    """The bf16 GGUF on llama-server: a warm prompt cache (cache_prompt true) computes other logprobs for the same
    request than a cold one (llama.cpp #28368); EPT084 names the pairs and the shift. The Q4_1 GGUF's are the same
    bit for bit."""
    server = live_server(LlamaCppServer, bf16_gguf, parallel=4, ctx=2048)
    found = probe(smollm2_reference, server.url, "EPT084")
    moved = [f for f in found if "logprobs move" in f.message]
    assert moved and "prompt cache off vs on" in moved[0].message, [f.message for f in found]
    healthy = live_server(LlamaCppServer, smollm2_gguf, parallel=4)
    found = probe(smollm2_reference, healthy.url, "EPT084")
    assert severities(found) == ["info"] and "identical across 5 pairs" in found[0].message
    assert all(pair["logprob_shift"] == 0 for pair in found[0].evidence["pairs"])
