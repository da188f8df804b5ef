"""The serving chain (EPT071-074, EPT081-084) against llama.cpp's real C++ llama-server, directly and
behind tests/chain_faults.py's proxy planting each fault.

llama-server runs SmolLM2-135M-Instruct (Q4_1) with `--jinja` and a Hermes tool template (tests/chain_assets.py):
it renders the tools, parses <tool_call> into tool_calls, forces a call under tool_choice "required" and follows
response_format with a grammar. The reference is the same model as a Hugging Face directory with the same
template. The healthy server must give no warning and no error; each planted fault must be named by its check.
"""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from checks.endpoint.chain import scenarios
from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests import chain_assets
from tests.assets import or_fail
from tests.chain_faults import LATE_TOKEN, ChainProxy
from tests.load_servers import LlamaCppServer

pytestmark = [pytest.mark.assets, pytest.mark.slow]
CHAIN = ["EPT07", "EPT08"]
GPT_OSS_TEMPLATE = Path(__file__).parents[2] / "checks" / "tokenizer" / "tool_templates" / "openai-gpt-oss-120b.jinja"


@pytest.fixture(scope="module")
def reference():
    ref = Reference.load(or_fail(chain_assets.model_dir, "tools"))
    ref.engine()
    return ref


@pytest.fixture(scope="module")
def server(live_server):
    """llama-server on the tool-template GGUF, shared by every test file that asks for it (tests/server_pool.py)."""
    return live_server(LlamaCppServer, or_fail(chain_assets.gguf, "tools"), "--jinja", parallel=1, ctx=8192)


def probe(reference, url, select=CHAIN):
    started = time.perf_counter()
    report = run_endpoint(reference.path, EndpointOptions(url, timeout_s=300, deadline_s=1200), reference=reference,
                          select=select)
    print("\n".join(f"{f.check} {f.severity.value}: {f.message}" for f in report.findings))
    print(f"{select}: {time.perf_counter() - started:.0f} s")
    return report


def flagged(report, levels=("error", "warning")):
    return sorted({(f.check, f.severity.value) for f in report.findings if f.severity.value in levels})


def test_llama_server_really_calls(server):
    """The incident-free baseline, seen on the server itself: the one-shot conversation gets a parsed call."""
    body = {**scenarios.tool_request("required"), "temperature": 0}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300).json()
    message = answer["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert answer["choices"][0]["finish_reason"] == "tool_calls"


def test_healthy_llama_server_has_no_warning(server, reference):
    """The whole chain (EPT001 and every EPT07x/08x) on the healthy server: the suite's longest test (87 s on 2
    cores beside the other worker's tests before EPT083 took 8 prompts and EPT084 answers to their stop; 231 s
    with them under a load average of 7-9), since it is the one run that sees every check quiet together on a real
    parser; EPT083's 4k-token prompts and EPT084's cache on/off answers are most of it. Each fault below runs only
    its own check."""
    with ChainProxy(server.url) as proxy:      # transparent: its answers are replayed to the faults below
        report = probe(reference, proxy.url, select=["EPT001", *CHAIN])
    assert flagged(report) == []
    runs = {r.id: r.status for r in report.checks}
    assert runs["EPT071"] == "passed" and runs["EPT082"] == "passed" and runs["EPT083"] == "passed"
    assert runs["EPT075"] == "passed" and runs["EPT076"] == "passed" and runs["EPT085"] == "passed"
    assert runs["EPT081"] == "skipped" and runs["EPT086"] == "skipped"      # no thinking markers, no switch
    assert "get_weather" in report.findings_for("EPT071")[-1].message
    requests = report.findings_for("EPT001")[0].evidence["requests"]["count"]
    print("requests:", requests)
    # detection and the whole chain (EPT083 8, EPT084 7, EPT075 and EPT076 2 each, EPT085's 4 renderings): inside
    # the budget of 80
    assert requests <= 46


@pytest.mark.parametrize("fault, check, severity", [
    ("raw-text-call", "EPT071", "error"),
    ("args-not-json", "EPT071", "error"),
    ("args-double", "EPT071", "error"),
    ("args-schema", "EPT071", "error"),
    ("finish-stop", "EPT071", "warning"),
    ("stream-args", "EPT072", "error"),
    ("tools-dropped", "EPT073", "error"),
    ("format-ignored", "EPT082", "error"),
    ("format-invalid", "EPT082", "error"),
    ("truncate", "EPT083", "error"),
    ("stream-diverge", "EPT084", "error"),
    ("cache-diverge", "EPT084", "error"),
    ("cut:user:middle", "EPT083", "error"),
    ("cut:system:start", "EPT083", "error"),
    ("cut:tool:end", "EPT083", "error"),
    ("stream-word", "EPT084", "error"),
    ("seen-word", "EPT084", "error"),
    ("prefix-word", "EPT084", "error"),
    ("late-cache-diverge", "EPT084", "error"),
    ("drop-middle", "EPT083", "error"),
    ("empty-calls", "EPT071", "error"),
    ("args-empty", "EPT071", "error"),
    ("stream-call-lost", "EPT072", "error"),
    ("id-history", "EPT075", "error"),
    ("zero-arg-lost", "EPT076", "error"),
])
def test_fault_behind_the_proxy_is_caught(server, reference, fault, check, severity):
    """One check behind the proxy per fault, on the module's one llama-server (no server of its own). The proxy
    replays the server's answer to a request it has answered before in the session (the healthy run above asked
    them all), so a fault costs only the requests it rewrites: a cut or thinned prompt is read again, an answer
    rewritten on its way back costs nothing upstream. Without the replay EPT083 asks
    8 prompts of max_tokens 1 (10k prompt tokens in all, the longest ~4k), EPT084 7 answers run to their stop
    (51 tokens; 75 after the 1k shared prefix): seconds on an idle 2-core box (measured under a load average of
    7-9: EPT083 165 s, EPT084 31-49 s; under 12 with 6 prompts and 24-token answers: EPT083 195-317 s, EPT084
    63-78 s). The cut,
    stream-word, seen-word and prefix-word faults are the later ones: a third of one long message cut (the server
    reads and reports the cut prompt), a word replaced in every streamed answer, in an answer to messages seen
    before, and in an answer after another request sharing its long prefix."""
    with ChainProxy(server.url, fault) as proxy:
        report = probe(reference, proxy.url, select=[check])
    print(f"{fault}: {proxy.asked} requests sent to llama-server, {proxy.replayed} replayed")
    assert (check, severity) in flagged(report), fault
    assert all(c == check for c, _ in flagged(report, ("error",)))
    if fault.startswith("late-"):       # past the 24 tokens once compared, named by its position
        assert any(f"part at token {LATE_TOKEN} " in f.message for f in report.findings), fault
    if fault == "drop-middle":          # a long message in the middle of the conversation, and an assistant turn
        assert {f.evidence["probe"]["shape"] for f in report.findings if f.severity.value == "error"} == {
            "mid-conversation", "assistant"}


def test_a_slow_answer_is_the_probers_timeout_not_a_server_fault(server, reference):
    """`probe endpoint --context 4096` on a healthy llama-server the prober did not wait for (a loaded machine): a
    proxy answers every completion a minute late and --timeout is 3 s. No warning or error against the server:
    each check that waited skips, naming the option that would have let it wait."""
    with ChainProxy(server.url, "slow:60") as proxy:
        report = run_endpoint(reference.path, EndpointOptions(proxy.url, timeout_s=3, deadline_s=120, context=4096),
                              reference=reference, select=["EPT083", "EPT084", "EPT122", "EPT123"])
    assert flagged(report) == []
    runs = {r.id: (r.status, r.reason) for r in report.checks}
    assert all(status == "skipped" and "raise --timeout" in reason and "not a fault of the server" in reason
               for status, reason in runs.values()), runs


def test_llama_server_takes_tools_its_template_never_renders(live_server, smollm2_gguf, smollm2_dir):
    """The issue's silent case: SmolLM2's own template has no tools; llama-server --jinja takes them (even
    tool_choice "required") and answers prose with 200 OK."""
    ref = Reference.load(smollm2_dir)
    s = live_server(LlamaCppServer, smollm2_gguf, "--jinja", parallel=1, ctx=8192)
    body = {**scenarios.tool_request(), "temperature": 0}
    answer = httpx.post(f"{s.url}/v1/chat/completions", json=body, timeout=300)
    assert answer.status_code == 200 and not answer.json()["choices"][0]["message"].get("tool_calls")
    report = probe(ref, s.url, select=["EPT073", "EPT074"])
    assert flagged(report) == [("EPT073", "warning"), ("EPT074", "warning")]
    assert "never renders tool definitions" in report.findings_for("EPT073")[0].message


@pytest.mark.parametrize("fault, severity, words", [(None, "info", "reasoning split"),
                                                    ("think-leak", "error", "thinking leaks into content"),
                                                    ("reasoning-dropped", "error", "dropped the reasoning")])
def test_llama_server_reasoning_split(think_server, fault, severity, words):
    """llama-server splits the thinking template's reasoning into reasoning_content (the generation prompt opens
    <think>); the proxy puts it back into content, or empties it."""
    ref = Reference.load(or_fail(chain_assets.model_dir, "think"))
    with ChainProxy(think_server.url, fault) as proxy:
        report = probe(ref, proxy.url, select=["EPT081"])
    (finding,) = report.findings
    assert finding.severity.value == severity and words in finding.message


@pytest.mark.parametrize("fault, severity, words", [(None, "info", "the answer is in content"),
                                                    ("thinking-off-misrouted", "error", "content is empty")])
def test_llama_server_answer_with_thinking_off(think_server, fault, severity, words):
    """`chat_template_kwargs: {"enable_thinking": false}`: the thinking template closes its block in the generation
    prompt and llama-server returns the answer in content; the proxy moves it to reasoning_content (vLLM's
    Qwen3 parser with thinking off)."""
    ref = Reference.load(or_fail(chain_assets.model_dir, "think"))
    with ChainProxy(think_server.url, fault) as proxy:
        report = probe(ref, proxy.url, select=["EPT086"])
    (finding,) = report.findings
    assert finding.severity.value == severity and words in finding.message


def test_llama_server_serving_the_gpt_oss_template_drops_later_system_messages(live_server, reference):
    """llama-server --jinja --chat-template-file with gpt-oss's released template in front of a model whose own
    template renders every system message: its /apply-template prompt keeps only the first (vllm#44330's
    template); the reference template keeps them all, so the server dropped them."""
    s = live_server(LlamaCppServer, or_fail(chain_assets.gguf, "tools"), "--jinja", "--chat-template-file",
                    str(GPT_OSS_TEMPLATE), parallel=1, ctx=2048)
    report = probe(reference, s.url, select=["EPT085"])
    dropped = [(f.evidence["shape"], f.message.split(" of the ")[0]) for f in report.findings]
    later = "the server drops message {} (system: 'From now on, answer in German.')"
    assert dropped == [("two system messages", later.format(1)), ("system mid-conversation", later.format(3)),
                       ("system after the first turn only", later.format(2))]
    assert flagged(report) == [("EPT085", "error")]


@pytest.fixture(scope="module")
def think_server(live_server):
    return live_server(LlamaCppServer, or_fail(chain_assets.gguf, "think"), "--jinja", parallel=1, ctx=8192)


# ------------------------------------------------------------------------------------------ llama-cpp-python


@pytest.fixture(scope="module")
def python_server(live_server):
    """llama-cpp-python 0.3.36's server on the tool-template GGUF: it renders the tools (the GGUF's template through
    its Jinja formatter) but has no Hermes parser."""
    from tests.endpoint_assets import LlamaServer
    return live_server(LlamaServer, or_fail(chain_assets.gguf, "tools"))


def test_llama_cpp_python_leaves_hermes_calls_in_content(python_server, reference):
    """A real incident of this server: the model calls (<tool_call>{..}</tool_call>), the server returns it as text."""
    body = {**scenarios.tool_request(), "temperature": 0, "repeat_penalty": 1.0}
    answer = httpx.post(f"{python_server.url}/v1/chat/completions", json=body, timeout=300).json()
    message = answer["choices"][0]["message"]
    assert not message.get("tool_calls") and "<tool_call>" in message["content"]      # the incident
    report = probe(reference, python_server.url, select=["EPT071", "EPT073"])
    raw = [f for f in report.findings_for("EPT071") if "left the call as raw text" in f.message]
    assert raw and raw[0].severity.value == "error" and raw[0].evidence["format"] == "hermes"
    assert flagged(report, ("error",)) == [("EPT071", "error")]    # the tools were rendered: not dropped


def test_llama_cpp_python_has_no_reasoning_parser(live_server):
    ref = Reference.load(or_fail(chain_assets.model_dir, "think"))
    from tests.endpoint_assets import LlamaServer
    s = live_server(LlamaServer, or_fail(chain_assets.gguf, "think"))
    report = probe(ref, s.url, select=["EPT081"])
    (finding,) = report.findings
    assert finding.severity.value == "warning" and "no reasoning parser" in finding.message


@pytest.mark.parametrize("fault, check", [(None, "EPT083"), ("truncate", "EPT083"), (None, "EPT084"),
                                          ("stream-diverge", "EPT084"), ("cache-diverge", "EPT084")])
def test_llama_cpp_python_behind_the_proxy(python_server, reference, fault, check):
    """The faults that need no tool parser, planted in front of llama-cpp-python (no proxy fault: a transparent
    proxy, and no error: its window of 2048 refuses the 4k prompt honestly; its prefix cache may flip near ties)."""
    with ChainProxy(python_server.url, fault) as proxy:
        report = probe(reference, proxy.url, select=[check])
    errors = flagged(report, ("error",))
    assert errors == ([] if fault is None else [(check, "error")])
    if fault is None:
        assert flagged(report) == []
