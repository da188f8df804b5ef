"""`diff URL_A URL_B` on real servers serving SmolLM2-135M-Instruct: two servers of the same GGUF read near-equal
and the report names what differs and by how much; a faulted twin (its layers stored in reverse order) is caught
at the first token, with both margins.

The pairs come from PAIRS, each a function of the test's `request` returning the two URLs from session servers
(tests/server_pool.py: the same llama-server and llama-cpp-python processes the endpoint files use), so another
pair is one more entry: a vLLM pair returns (llama-server's URL, the session vLLM server's URL) with what that
pair is expected to differ in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

from checks.diff.servers.inputs import ServerOptions
from checks.diff.servers.logprobs import KLD_WARN
from llmdoctor.run.server_diff import ServerDiffOptions, run_server_diff
from reference_engine.tokenizer import Tokenizer
from tests.assets import or_fail
from tests.assets_gguf import smollm2_converted_gguf
from tests.checks.endpoint.broken_ggufs import broken_gguf
from tests.endpoint_assets import LlamaServer
from tests.load_servers import LlamaCppServer

OPTIONS = ServerDiffOptions(ServerOptions(prompts=2, max_tokens=8), timeout_s=300)


@dataclass(frozen=True)
class Pair:
    servers: Callable[[pytest.FixtureRequest], tuple[str, str]]   # (reference URL, candidate URL)
    chain_differences: tuple[str, ...]   # DIF073 messages (prefixes) this pair shows, the first required: true
    #                                      properties of the two servers, named in the PAIRS comment
    kld_below: float = KLD_WARN          # both KL means under it; above DIF071's warning threshold (two quantizations,
    #                                      e.g. vLLM on the float32 directory against a Q4_1 GGUF) DIF071 may warn
    real_flips: bool = False             # DIF070 may find a real difference (two quantizations far into an answer)


def llama_server_and_llama_cpp_python(request) -> tuple[str, str]:
    live_server, gguf = request.getfixturevalue("live_server"), request.getfixturevalue("smollm2_gguf")
    return (live_server(LlamaCppServer, gguf, parallel=1, ctx=2048).url,      # shared with the competence probes
            live_server(LlamaServer, gguf).url)                               # shared with the endpoint files


def llama_server_f32_and_vllm(request) -> tuple[str, str]:
    """llama-server on the converter's float32 GGUF against the session vLLM on the float32 directory: the same
    numbers written two ways, read by two engines."""
    gguf = or_fail(smollm2_converted_gguf, "f32")
    return (request.getfixturevalue("live_server")(LlamaCppServer, gguf, parallel=1, ctx=2048).url,
            request.getfixturevalue("vllm_server").url)


PAIRS = {
    # llama-cpp-python 0.3.36 validates response_format.type as "text" or "json_object" (HTTP 500 on json_schema);
    # the tool request is answered in text by both, and llama-server's flash attention (-fa auto) against
    # llama-cpp-python's plain attention moves the long answers' text
    "llama-server vs llama-cpp-python": Pair(llama_server_and_llama_cpp_python,
                                             ("structured output: only the candidate refuses it",
                                              "tool call: content differs")),
}
# vLLM parses the tool call (hermes parser) where llama-server answers in text, and enforces json_schema; its own
# test below names the session vLLM's fixture, which is what launches that server at collection
VLLM_PAIR = Pair(llama_server_f32_and_vllm, ("tool call",))


def show(report) -> None:
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))


def loud(report, check: str) -> list[str]:
    return [f.message for f in report.findings if f.check == check and f.severity.value in ("warning", "error")]


@pytest.mark.parametrize("name", PAIRS)
def test_the_same_model_on_two_servers_is_near_equal(name, request, smollm2_dir):
    """Cost: ~22 s alone on the shared 2-core box (load average ~14), both servers started for it (shared in the
    suite): 9 requests per server, both servers asked at once, most of it the two 40-token chain answers"""
    assert_near_equal(PAIRS[name], request, smollm2_dir)


def test_llama_server_and_vllm_are_near_equal(vllm_server, request, smollm2_dir):
    """The same float32 SmolLM2 on llama.cpp's server and on vLLM's CPU build."""
    assert_near_equal(VLLM_PAIR, request, smollm2_dir)


def assert_near_equal(pair: Pair, request, smollm2_dir) -> None:
    url_a, url_b = pair.servers(request)
    report = run_server_diff(url_a, url_b, OPTIONS, tokenizer=Tokenizer.from_pretrained(smollm2_dir))
    show(report)
    assert loud(report, "DIF072") == []
    assert loud(report, "DIF070") == [] or pair.real_flips
    kl = report.findings_for("DIF071")[0]
    assert max(kl.evidence["mean_kld"], kl.evidence["mean_kld_reversed"]) < pair.kld_below
    assert kl.message.startswith("near-equal: ") or pair.kld_below > KLD_WARN
    counts = report.findings_for("DIF072")[0].evidence["counts"]
    assert all(row["reference"] == row["candidate"] == row["model"] for row in counts)   # the model's tokenizer too
    chain = loud(report, "DIF073")
    assert all(any(m.startswith(known) for known in pair.chain_differences) for m in chain), chain
    assert any(m.startswith(pair.chain_differences[0]) for m in chain), chain


def test_a_faulted_twin_is_caught_at_the_first_token(live_server, smollm2_gguf):
    """llama-cpp-python on the same GGUF with its blocks stored in reverse order (a converter that numbered the
    layers backwards) against the healthy one: every answer parts at token 1 and each side's margin there is
    far beyond a near tie; the top-logprob KL is an error; the prompts are counted alike (same tokenizer).
    Cost: ~15 s on the shared 2-core box (load average ~14): a broken server started for it, 6 requests each"""
    healthy = live_server(LlamaServer, smollm2_gguf)
    broken = live_server(LlamaServer, or_fail(broken_gguf, smollm2_gguf, "layers-reversed"))
    report = run_server_diff(healthy.url, broken.url, OPTIONS, select=["DIF070", "DIF071", "DIF072"])
    show(report)
    parted = [f for f in report.findings if f.check == "DIF070"]
    assert [f.severity.value for f in parted] == ["warning", "warning"]
    assert all(f.evidence["step"] == 0 and "answers part at token 1: " in f.message for f in parted)
    assert all(f.evidence["reference_token"] != f.evidence["candidate_token"] for f in parted)
    assert report.findings_for("DIF071")[0].severity.value == "error"
    assert loud(report, "DIF072") == []
    assert report.exit_code() == 1
