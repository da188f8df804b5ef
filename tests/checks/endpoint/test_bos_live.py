"""EPT011 against the real llama-server: BOS doubled, missing and cut as a duplicate, seen through the server's own
/tokenize and /apply-template (vLLM's /tokenize with messages: tests/llmdoctor/run/test_vllm_live.py, where the
healthy vLLM passes EPT011).

- Doubled: SmolLM2's GGUF with `tokenizer.ggml.add_bos_token` flipped to true by gguf-py (tests/endpoint_assets.py
  "double-bos"). SmolLM2's BOS is <|im_start|>, which its template writes first: a client that renders the
  template and sends it as a completion gets two, and a plain prompt one the model never saw.
- Missing: Gemma 3 270M's published GGUF served with add_bos_token false (`--override-kv`, llama-server's own
  switch for a GGUF's metadata): Gemma is trained with <bos>, and raw prompts reach it without one.
- Cut as a duplicate: llama-server --jinja before ggml-org/llama.cpp#15086 removed the template's leading bos_token
  text whatever add_bos_token said; GLM-4.5's GGUF (BOS [gMASK], written by its template, add_bos_token false) lost
  [gMASK]. SmolLM2's GGUF has the same shape (BOS <|im_start|>, written by the template, add_bos_token false); the
  pinned llama-server keeps it (the healthy twin), and a proxy that cuts it from /apply-template as the old one did
  plants the fault (tests/chain_faults.py "bos-dedup").

The healthy servers are the pool's (SmolLM2 on one slot, shared with the competence, load and diff files)."""
from __future__ import annotations

import httpx
import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests import endpoint_assets
from tests.assets import gemma3_270m_gguf, or_fail
from tests.chain_faults import ChainProxy
from tests.load_servers import LlamaCppServer

pytestmark = [pytest.mark.assets, pytest.mark.slow]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
NO_BOS = ("--override-kv", "tokenizer.ggml.add_bos_token=bool:false")


def probe(reference, url, also=()):
    report = run_endpoint(reference.path, EndpointOptions(url, timeout_s=120), reference=reference,
                          select=["EPT011", *also])
    found = report.findings_for("EPT011")
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))
    return {r.id: r.status for r in report.checks}, found


def server_ids(url, text):
    body = {"content": text, "add_special": True, "parse_special": True}
    return httpx.post(f"{url}/tokenize", json=body, timeout=60).json()["tokens"]


def healthy_smollm2(live_server, smollm2_gguf):
    return live_server(LlamaCppServer, smollm2_gguf, parallel=1, ctx=2048)   # the pool's, shared


def test_healthy_llama_server_is_quiet(live_server, smollm2_gguf, smollm2_reference):
    server = healthy_smollm2(live_server, smollm2_gguf)
    rendered = smollm2_reference.render(QUESTION)
    assert server_ids(server.url, rendered) == smollm2_reference.chat_ids(QUESTION)
    runs, found = probe(smollm2_reference, server.url)
    assert runs["EPT011"] == "passed" and found == []


def test_add_bos_flipped_doubles_bos(live_server, smollm2_reference):
    server = live_server(LlamaCppServer, or_fail(endpoint_assets.variant_gguf, "double-bos"), parallel=1, ctx=2048)
    rendered = smollm2_reference.render(QUESTION)
    assert server_ids(server.url, rendered)[:2] == [1, 1]          # the incident: <|im_start|> twice
    runs, found = probe(smollm2_reference, server.url, also=["EPT012"])
    by_where = {f.evidence["where"]: f for f in found}
    double = by_where["a chat prompt rendered by the client and sent as a completion"]
    assert double.severity.value == "error" and double.message.startswith("double BOS")
    assert "server [1 '<|im_start|>', 1 '<|im_start|>'" in double.message
    assert by_where["a completion prompt"].severity.value == "warning"
    # the server's own chat route de-duplicates: /apply-template cuts the template's <|im_start|> and the
    # tokenizer adds it back, one BOS; that rendering is EPT011's business, not another template (EPT012)
    assert "the server's chat prompt" not in by_where and runs["EPT012"] == "passed"


@pytest.fixture(scope="module")
def gemma_reference(gemma3_270m_dir):
    return Reference.load(gemma3_270m_dir)


def test_bos_missing_on_a_model_trained_with_it(live_server, gemma_reference):
    reference = gemma_reference
    server = live_server(LlamaCppServer, or_fail(gemma3_270m_gguf), *NO_BOS, parallel=1, ctx=1024)
    assert server_ids(server.url, "Hello")[0] != reference.bos_id    # the incident: no <bos>
    runs, found = probe(reference, server.url)
    (missing,) = [f for f in found if f.evidence["where"] == "a completion prompt"]
    assert found == [missing]          # the template writes <bos> itself: the chat prompts keep it
    assert missing.severity.value == "error" and missing.message.startswith("missing BOS on a completion prompt")
    assert f"reference starts [{reference.bos_id} '<bos>'" in missing.message


def test_gemma_as_published_is_quiet(live_server, gemma_reference):
    server = live_server(LlamaCppServer, or_fail(gemma3_270m_gguf), parallel=1, ctx=1024)
    runs, found = probe(gemma_reference, server.url)
    assert runs["EPT011"] == "passed" and found == []


def test_template_bos_cut_as_a_duplicate(live_server, smollm2_gguf, smollm2_reference):
    server = healthy_smollm2(live_server, smollm2_gguf)
    with ChainProxy(server.url, "bos-dedup") as proxy:
        rendered = httpx.post(f"{proxy.url}/apply-template", json={"messages": QUESTION}, timeout=60).json()
        assert not rendered["prompt"].startswith("<|im_start|>")         # the incident, as the old server did it
        runs, found = probe(smollm2_reference, proxy.url)
    (cut,) = found
    assert cut.evidence["where"] == "the server's chat prompt" and cut.severity.value == "error"
    assert cut.message.startswith("missing BOS on the server's chat prompt: the template writes '<|im_start|>'")
    assert "llama.cpp#15086" in cut.hint
