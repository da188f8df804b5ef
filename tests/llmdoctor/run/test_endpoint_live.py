"""`llmdoctor probe endpoint` against a REAL llama-cpp-python server (python -m llama_cpp.server) on 127.0.0.1.

Each configuration reproduces a serving incident on SmolLM2-135M-Instruct GGUFs (tests/endpoint_assets.py). Every
test first shows the incident against the server itself (raw HTTP, transformers as the oracle), then checks
that the tool names it: the right EPT id at the right severity, and no errors where the server is healthy.
"""
from __future__ import annotations


import httpx
import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests import endpoint_assets
from tests.assets import or_fail

pytestmark = [pytest.mark.assets, pytest.mark.slow]
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.fixture(scope="module")
def reference(smollm2_reference):
    return smollm2_reference          # loaded once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def hf_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def serve():
    """serve(gguf, *args): a server for this module's incidents only, stopped at its end (a failure or an
    interrupt included: module fixtures are torn down then too)."""
    servers = []

    def start(gguf, *args):
        server = or_fail(endpoint_assets.LlamaServer(gguf, *args).start)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()


def probe(reference, url, **kw):
    """Every EPT0 check but the serving chain's (EPT07x/08x: test_chain_live.py runs them on llama-server, and
    test_llama_cpp_python_chain below on this server) and the competence probes' (EPT06x: ~20 echo requests, slow
    on llama-cpp-python; tests/checks/endpoint/test_endpoint_competence_live.py runs them on these servers) and the
    serving configurations' (EPT043-EPT045: tests/checks/endpoint/test_serving_live.py builds each on llama-server)."""
    report = run_endpoint(reference.path, EndpointOptions(url, timeout_s=120, deadline_s=900, **kw),
                          reference=reference, ignore=["EPT06", "EPT07", "EPT08", "EPT043", "EPT044", "EPT045"])
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))
    return report


def ids(report, severity=("error",)):
    return sorted({f.check for f in report.findings if f.severity.value in severity})


def hf_chat_len(hf_tokenizer, messages) -> int:
    """The oracle: transformers renders the template and tokenizes it as apply_chat_template(tokenize=True) does."""
    text = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(hf_tokenizer(text, add_special_tokens=False)["input_ids"])


def chat(url, messages, max_tokens=48, **kw):
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "repeat_penalty": 1.0, **kw}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()


# ---------------------------------------------------------------------------------------------- healthy


@pytest.fixture(scope="module")
def healthy(live_server, smollm2_gguf):
    """The healthy SmolLM2 server, shared with the other live files (tests/server_pool.py)."""
    return live_server(endpoint_assets.LlamaServer, smollm2_gguf)


def test_correct_server_gives_a_clean_report(healthy, reference, hf_tokenizer):
    answer = chat(healthy.url, QUESTION)
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["prompt_tokens"] == hf_chat_len(hf_tokenizer, QUESTION)
    report = probe(reference, healthy.url + "/v1")  # the OpenAI base URL works as well as the root
    assert ids(report) == []
    assert_only_rare_split_warning(report)
    runs = {r.id: r.status for r in report.checks}
    assert runs["EPT001"] == "passed" and runs["EPT041"] == "passed" and runs["EPT022"] == "passed"
    assert report.findings_for("EPT001")[0].evidence["server"] == "llama-cpp-python"
    # its request defaults are read from /openapi.json and listed (SmolLM2 sets none: information only)
    assert "repetition_penalty 1.1" in report.findings_for("EPT031")[0].message
    # llama-cpp-python's window (--n_ctx 2048) named by the error of an oversize request
    assert report.findings_for("EPT051")[0].evidence["server_max_context"] == 2048


def assert_only_rare_split_warning(report):
    """The one real difference of a healthy llama.cpp: its SmolLM2 ('smollm') pre-tokenizer regex splits '½' off
    the space before it, transformers does not. Reported as a warning (non-ASCII only), nothing else."""
    assert ids(report, ("warning",)) in ([], ["EPT013"])
    for finding in report.findings_for("EPT013"):
        spans = [s for t in finding.evidence["texts"] for s in t["spans"]]
        assert finding.severity.value == "warning" and spans and all("½" in s["text"] for s in spans)


def test_gguf_reference_also_clean(healthy, smollm2_gguf):
    ref = Reference.load(smollm2_gguf)
    report = run_endpoint(smollm2_gguf, EndpointOptions(healthy.url, timeout_s=120, deadline_s=600), reference=ref,
                          select=["EPT0"], ignore=["EPT04", "EPT06", "EPT07", "EPT08"])
    assert ids(report) == []
    assert_only_rare_split_warning(report)


def test_llama_cpp_python_chain(healthy, reference):
    """llama-cpp-python 0.3.36 on SmolLM2's own template (which never renders tools): it takes `tools` and
    tool_choice "required" and answers prose (EPT073, EPT074 warnings, true of this server) and refuses a
    json_schema response_format with HTTP 500 "validation error" (EPT082 skipped naming it). No error. EPT083
    and EPT084 (prompt lengths, stream and cache parity: most of this run's time on a one-thread Python server)
    are read on this server software in test_chain_live.py (test_llama_cpp_python_behind_the_proxy), healthy and
    faulted; here, the rest of the chain."""
    report = run_endpoint(reference.path, EndpointOptions(healthy.url, timeout_s=120, deadline_s=900),
                          reference=reference, select=["EPT07", "EPT08"], ignore=["EPT083", "EPT084"])
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))
    assert ids(report) == []
    assert ids(report, ("warning",)) == ["EPT073", "EPT074"]
    assert "never renders tool definitions" in report.findings_for("EPT073")[0].message
    runs = {r.id: (r.status, r.reason) for r in report.checks}
    assert runs["EPT082"][0] == "skipped" and "refuses response_format json_schema" in runs["EPT082"][1]
    assert runs["EPT081"][0] == "skipped"


# ---------------------------------------------------------------------------------------------- template


@pytest.mark.parametrize("chat_format", ["chatml", "llama-2"])
def test_wrong_chat_format_is_template_drift(serve, smollm2_gguf, reference, hf_tokenizer, chat_format):
    server = serve(smollm2_gguf, "--chat_format", chat_format)
    expected = hf_chat_len(hf_tokenizer, QUESTION)
    served = chat(server.url, QUESTION, max_tokens=1)["usage"]["prompt_tokens"]
    assert served != expected                               # the incident, seen on the server
    report = probe(reference, server.url)
    assert "EPT012" in ids(report)
    drift = report.findings_for("EPT012")[0]
    rows = {r["conversation"]: r for r in drift.evidence["conversations"]}
    assert rows["no system"]["server_prompt_tokens"] == served
    if chat_format == "chatml":  # same markers, but the model's default system turn is gone
        assert rows["with system"]["server_prompt_tokens"] == rows["with system"]["reference_template_tokens"]
        assert "default system turn" in drift.message


# ---------------------------------------------------------------------------------------------- stopping


def test_broken_stop_token_runs_to_length(serve, reference):
    gguf = or_fail(endpoint_assets.variant_gguf, "broken-stop")
    server = serve(gguf)
    answer = chat(server.url, QUESTION)
    assert answer["choices"][0]["finish_reason"] == "length"   # the incident: it really never stops
    report = probe(reference, server.url)
    assert "EPT022" in ids(report)
    assert "did not stop where the model ended its turn" in report.findings_for("EPT022")[0].message
    # the GGUF itself as the reference: its template closes turns with a token that is not EOS
    broken = Reference.load(gguf)
    static = run_endpoint(gguf, EndpointOptions(server.url, timeout_s=120), reference=broken, select=["EPT021"])
    assert ids(static) == ["EPT021"] and "<|turn_end|>" in static.findings[0].message


# ---------------------------------------------------------------------------------------------- tokenizer


def test_default_pretokenizer_splits_differently(serve, reference, hf_tokenizer):
    server = serve(or_fail(endpoint_assets.variant_gguf, "pre-default"))
    text = "1234567890 100,000.00 $5.99 3rd 21st ...!!??"
    served = httpx.post(f"{server.url}/extras/tokenize", json={"input": text}, timeout=60).json()["tokens"]
    assert served != hf_tokenizer.encode(text, add_special_tokens=False)   # the incident
    report = probe(reference, server.url)
    assert "EPT013" in ids(report)
    spans = [s for t in report.findings_for("EPT013")[0].evidence["texts"] for s in t["spans"]]
    assert spans and all(s["reference"] != s["server"] for s in spans)


def test_double_bos(serve, reference, hf_tokenizer):
    """llama-cpp-python 0.3.36's chat route no longer adds BOS to a rendered template (its #1501 fix), but its
    completion route still does: a client that renders SmolLM2's template (which starts with <|im_start|> = BOS)
    and sends it to /v1/completions feeds the model BOS twice."""
    server = serve(or_fail(endpoint_assets.variant_gguf, "double-bos"))
    expected = hf_chat_len(hf_tokenizer, QUESTION)
    rendered = hf_tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    body = {"prompt": rendered, "max_tokens": 1, "temperature": 0}
    served = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120).json()["usage"]["prompt_tokens"]
    assert served == expected + 1                                           # the incident
    assert chat(server.url, QUESTION, max_tokens=1)["usage"]["prompt_tokens"] == expected   # the chat route is fine
    report = probe(reference, server.url)
    assert "EPT011" in ids(report)
    messages = [f.message for f in report.findings_for("EPT011")]
    assert any(m.startswith("double BOS on a chat prompt rendered by the client") for m in messages)
    assert not any("server's chat prompt" in m for m in messages)
    assert "EPT012" not in ids(report)           # same template: the count differs by the BOS alone


# ---------------------------------------------------------------------------------------------- numerics


def test_requantized_model_is_drift_not_a_bug(serve, reference):
    server = serve(or_fail(endpoint_assets.variant_gguf, "q4_0"))
    report = probe(reference, server.url)
    assert not {"EPT041", "EPT042"} & set(ids(report))
    drift = report.findings_for("EPT041") + report.findings_for("EPT042")
    assert drift and any("drift" in f.message for f in drift)


# ---------------------------------------------------------------------------------------------- robustness


def test_dead_server_is_a_finding_not_a_hang(reference):
    report = run_endpoint(reference.path, EndpointOptions(f"http://127.0.0.1:{endpoint_assets.free_port()}",
                                                          timeout_s=2), reference=reference)
    assert ids(report) == ["EPT001"] and "ConnectError" in report.findings[0].message
    assert all(r.status == "skipped" for r in report.checks if r.id != "EPT001")


def test_api_key_from_env_never_in_report(serve, smollm2_gguf, reference, monkeypatch, tmp_path):
    server = serve(smollm2_gguf, "--api_key", "s3cret-key-123")
    monkeypatch.setenv("LLMDOCTOR_TEST_KEY", "s3cret-key-123")
    ok = run_endpoint(reference.path, EndpointOptions(server.url, api_key_env="LLMDOCTOR_TEST_KEY", timeout_s=120),
                      reference=reference, select=["EPT001", "EPT011"])
    assert ids(ok) == []
    denied = run_endpoint(reference.path, EndpointOptions(server.url, timeout_s=120), reference=reference,
                          select=["EPT001"])
    assert ids(denied) == ["EPT001"] and "401" in denied.findings[0].message
    from reports import render
    out = tmp_path / "r.json"
    with open(out, "w") as f:
        render(ok, "json", f)
    assert "s3cret" not in out.read_text()

