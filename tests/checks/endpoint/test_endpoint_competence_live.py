"""The competence probes (EPT061-063) against REAL servers: llama-cpp-python's server on SmolLM2-135M-Instruct's
Q4_1 GGUF, healthy and rewired (tests/checks/endpoint/broken_ggufs.py), and llama.cpp's own llama-server when
the suite has built it. Each broken server is first shown to talk nonsense through its raw API (the healthy one
answers "Paris" and continues "1, 2, 3" on the same requests), then the probes must name it; the healthy server
gets no warning or error, with and without --model.

llama-cpp-python scores prompts (echo) only behind a BOS (probes/endpoint/prompt_logprobs.py): SmolLM2 adds none,
so without --model EPT061 skips there and the generated-token probes judge; with --model the BOS text is sent
first and the built-in text is scored. Parts are cut to 24 tokens here (PART_TOKENS) to keep echo on a loaded
CPU server short; the verdicts have wide margins (healthy 2.7 vs bound 5.2 nats/token on the full cut).
"""
from __future__ import annotations

import httpx
import pytest

from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from probes.endpoint import text_parts
from tests import endpoint_assets
from tests.assets import or_fail
from tests.checks.endpoint.broken_ggufs import broken_gguf

pytestmark = [pytest.mark.assets, pytest.mark.slow]
FRANCE = "The capital of France is"
COUNT = "1, 2, 3, 4, 5, 6,"


@pytest.fixture(scope="module")
def serve():
    servers = []

    def start(gguf):
        server = or_fail(endpoint_assets.LlamaServer(gguf).start)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def reference(smollm2_reference):
    return smollm2_reference          # loaded once per session (tests/conftest.py)


@pytest.fixture(autouse=True)
def short_parts(monkeypatch):
    monkeypatch.setattr(text_parts, "PART_TOKENS", 24)


def complete(url, prompt, max_tokens=8) -> str:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "repeat_penalty": 1.0}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=300).json()["choices"][0]["text"]


def probe(url, reference=None):
    report = run_endpoint(reference.path if reference else None, EndpointOptions(url, timeout_s=300, deadline_s=1800),
                          reference=reference, select=["EPT06"])
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))
    statuses = {c.id: c.status for c in report.checks}
    return report, statuses, sorted({f.check for f in report.findings if f.severity.value in ("warning", "error")})


@pytest.fixture(scope="module")
def healthy(live_server, smollm2_gguf):
    server = live_server(endpoint_assets.LlamaServer, smollm2_gguf)     # shared (tests/server_pool.py)
    assert "Paris" in complete(server.url, FRANCE) and complete(server.url, COUNT).split()[0].strip(",") == "7"
    return server


def talks_nonsense(url):
    """The oracle: the raw API of the broken server no longer knows Paris nor counts."""
    assert "Paris" not in complete(url, FRANCE, 16)
    assert complete(url, COUNT).split()[:1] != ["7,"]


def test_healthy_server_alone_is_clean(healthy):
    """Cost: ~17 s on the shared 2-core box (load average ~10): the probes without --model on the shared healthy
    server"""
    report, statuses, bad = probe(healthy.url)
    assert bad == []
    assert statuses == {"EPT061": "skipped", "EPT062": "passed", "EPT063": "passed"}
    assert report.findings_for("EPT062")[0].evidence["copied_words"] >= 12
    assert report.findings_for("EPT063")[0].evidence["continued"] == 6


def test_layers_reversed_is_caught_without_a_model(serve, smollm2_gguf):
    """Cost: ~30 s on the shared 2-core box (load average ~10): a broken server started for it and the three probes"""
    server = serve(or_fail(broken_gguf, smollm2_gguf, "layers-reversed"))
    talks_nonsense(server.url)
    report, _, bad = probe(server.url)
    assert bad == ["EPT062", "EPT063"]
    assert all(f.severity.value == "error" for f in report.findings if f.check in bad)
    assert report.findings_for("EPT063")[0].evidence["continued"] <= 1


def test_healthy_server_with_its_checkpoint_is_clean(healthy, reference):
    """Cost: ~65 s on the shared 2-core box (load average ~10): the three competence probes with --model: ~20 echo
    requests and the reference engine scoring the same text"""
    report, statuses, bad = probe(healthy.url, reference)
    assert bad == []
    assert statuses == {"EPT061": "passed", "EPT062": "passed", "EPT063": "passed"}
    text = report.findings_for("EPT061")[0].evidence
    assert text["loss"] < text["bound"] and abs(text["gap_nats_per_token"]) < 0.5   # Q4_1 vs float32: drift only
    assert report.findings_for("EPT062")[0].evidence["copy_ratio"] < 0.5


def test_shuffled_embeddings_caught_by_the_text_loss(serve, smollm2_gguf, reference):
    """Rows of the (tied) embedding permuted: the model still copies (induction does not need to know what a token
    means) but predicts no text: EPT061 and EPT063 fail, EPT062 may pass. The probes are complementary.
    Cost: ~80 s on the shared 2-core box (load average ~10): prompt-logprob (echo) requests on llama-cpp-python plus
    the reference's own scoring, on a broken server of its own"""
    server = serve(or_fail(broken_gguf, smollm2_gguf, "embeddings-shuffled"))
    talks_nonsense(server.url)
    report, _, bad = probe(server.url, reference)
    assert "EPT061" in bad and "EPT063" in bad
    text = report.findings_for("EPT061")[0]
    assert text.severity.value == "error" and "where its checkpoint does not" in text.message
    assert text.evidence["loss"] > text.evidence["bound"] > text.evidence["reference_loss"]


# ------------------------------------------------------------------------------------- llama.cpp's llama-server

@pytest.fixture(scope="module")
def llama_server():
    from tests.load_servers import LlamaCppServer
    servers = []

    def start(gguf):
        server = or_fail(LlamaCppServer(gguf, parallel=1, ctx=2048).start)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()


def test_llama_server_generated_route(llama_server, live_server, smollm2_gguf):
    """llama.cpp has no prompt logprobs: EPT061 skips naming it; the copy is judged from the greedy continuation,
    with the copied tokens' logprobs read from llama.cpp's chat-form completion logprobs.
    Cost: ~22 s on the shared 2-core box (load average ~10): healthy (shared) and broken llama-server, each probed"""
    from tests.load_servers import LlamaCppServer
    healthy = live_server(LlamaCppServer, smollm2_gguf, parallel=1, ctx=2048)     # shared with test_load_live
    report, statuses, bad = probe(healthy.url)
    assert bad == [] and statuses == {"EPT061": "skipped", "EPT062": "passed", "EPT063": "passed"}
    copy = report.findings_for("EPT062")[0].evidence
    assert copy["copied_words"] >= 12 and copy["copied_tokens_loss"] is not None and copy["copied_tokens_loss"] < 1
    broken = llama_server(or_fail(broken_gguf, smollm2_gguf, "layers-reversed"))
    talks_nonsense(broken.url)
    _, _, bad = probe(broken.url)
    assert bad == ["EPT062", "EPT063"]


def test_gemma3_on_llama_server_is_clean(llama_server):
    """No false alarm on another vocabulary and family: Gemma 3 270M's Q4_K_M GGUF (262k SentencePiece vocab).
    Cost: ~22 s on the shared 2-core box (load average ~10): a second family on llama-server (its own server, 262k
    vocabulary)"""
    from tests.assets import gemma3_270m_gguf
    server = llama_server(or_fail(gemma3_270m_gguf))
    _, statuses, bad = probe(server.url)
    assert bad == [] and statuses == {"EPT061": "skipped", "EPT062": "passed", "EPT063": "passed"}
