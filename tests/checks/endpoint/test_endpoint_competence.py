"""EPT061-063 (the competence probes through a server's API) on fake servers in each server's answer shapes
(tests/probes/endpoint/competence_fakes.py): a healthy toy model gets no warning or error on any server kind, a
broken one an error from every probe the server can take, and a probe a server cannot take is skipped, naming
what it lacks. The live tests (real llama-cpp-python servers, SmolLM2 GGUFs) are in test_endpoint_competence_live.py.
"""
from __future__ import annotations

import pytest

from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from probes.endpoint import EndpointClient, connect
from probes.endpoint.openai_api import parse_completion
from probes.endpoint.prompt_logprobs import NotOffered, ScoredPrompt, prompt_prefix
from probes.endpoint.text_parts import cut
from tests.probes.endpoint.competence_fakes import FakeServer

PROMPT_LOGPROBS = ("vllm", "tgi")          # the kinds whose fakes score prompts
KINDS = ("vllm", "tgi", "llama.cpp", "ollama", "openai")


def run(server: FakeServer):
    report = run_endpoint(None, EndpointOptions("http://127.0.0.1:8000/v1"), transport=server.transport(),
                          select=["EPT001", "EPT06"])
    statuses = {c.id: (c.status, c.reason) for c in report.checks}
    bad = sorted({f.check for f in report.findings if f.severity.value in ("warning", "error")})
    return report, statuses, bad


@pytest.mark.parametrize("kind", KINDS)
def test_healthy_server_is_clean_without_a_model(kind):
    report, statuses, bad = run(FakeServer(kind))
    assert bad == []
    assert statuses["EPT062"][0] == "passed" and statuses["EPT063"][0] == "passed"
    if kind in PROMPT_LOGPROBS:
        assert statuses["EPT061"][0] == "passed"
        text = report.findings_for("EPT061")[0]
        assert text.evidence["loss"] == pytest.approx(2.5, abs=0.3) and text.evidence["loss"] < text.evidence["bound"]
        copy = report.findings_for("EPT062")[0].evidence
        assert copy["copy_ratio"] < 0.2                   # 0.2 / 2.5 nats on the second copy
    else:
        status, reason = statuses["EPT061"]
        assert status == "skipped" and "EPT062 judges this server" in reason
        assert report.findings_for("EPT062")[0].evidence["copied_words"] == 16


@pytest.mark.parametrize("kind", KINDS)
def test_broken_server_is_caught_without_a_model(kind):
    report, statuses, bad = run(FakeServer(kind, healthy=False))
    expected = ["EPT061", "EPT062", "EPT063"] if kind in PROMPT_LOGPROBS else ["EPT062", "EPT063"]
    assert bad == expected
    assert all(f.severity.value == "error" for f in report.findings if f.check in expected)
    assert "talks nonsense" in report.findings_for("EPT063")[0].message
    assert all(s["loops"] for s in report.findings_for("EPT063")[0].evidence["sequences"])
    if kind in PROMPT_LOGPROBS:
        finding = report.findings_for("EPT061")[0]
        assert "unigram baseline" in finding.message and finding.evidence["loss"] == pytest.approx(11.0)
        assert report.findings_for("EPT062")[0].evidence["copy_ratio"] == pytest.approx(1.0)


def test_llamacpp_completion_logprobs_in_chat_form_are_read():
    server = FakeServer("llama.cpp")
    report, _, _ = run(server)
    assert report.findings_for("EPT062")[0].evidence["copied_tokens_loss"] == pytest.approx(0.1)
    assert not any(r["body"].get("echo") for r in server.seen)    # llama.cpp is known to refuse echo: not asked


def test_openai_server_refusing_echo_falls_back_to_generated_tokens():
    server = FakeServer("openai")
    report, statuses, _ = run(server)
    assert "refused echo" in statuses["EPT061"][1]
    assert "refused echo" in report.findings_for("EPT062")[0].evidence["route"]


def test_chat_only_server_skips_naming_the_route():
    class ChatOnly(FakeServer):
        def completion(self, body):
            return None
    _, statuses, bad = run(ChatOnly("openai"))
    assert bad == []
    assert "no /v1/completions route" in statuses["EPT063"][1]


def test_llama_cpp_python_echo_needs_a_bos():
    """llama-cpp-python reads echo logprobs from logit row 0 whether or not it dropped a BOS: without a BOS the
    values are shifted by one token. The text goes behind the BOS text when one is known, else no echo."""
    no_bos = connect(EndpointClient("http://x", transport=FakeServer("llama-cpp-python", bos=False).transport()))
    assert no_bos.surface.kind == "llama-cpp-python"
    with pytest.raises(NotOffered, match="misaligns"):
        prompt_prefix(no_bos.surface)
    assert prompt_prefix(no_bos.surface, "<|im_start|>") == "<|im_start|>"
    with_bos = connect(EndpointClient("http://x", transport=FakeServer("llama-cpp-python").transport()))
    assert prompt_prefix(with_bos.surface, "<|im_start|>") == ""
    _, statuses, _ = run(FakeServer("llama-cpp-python", bos=False))
    assert statuses["EPT061"][0] == "skipped" and "misaligns" in statuses["EPT061"][1]


def test_scored_prompt_finds_the_text_behind_a_bos_and_lost_bytes():
    scored = ScoredPrompt(["<s>", "Hello", " world"], [None, -1.0, -2.0], None, "echo")
    assert scored.ends("Hello world") == [0, 5, 11] and scored.text_start("Hello world") == 1
    # a server that shows a token holding half of a multi-byte character as "" still lines up (ASCII only)
    lossy = ScoredPrompt(["<s>", "na", "", "ve"], [None, -1.0, -1.0, -1.0], None, "echo")
    assert lossy.ends("naïve") is None and lossy.text_start("naïve") == 1
    assert ScoredPrompt(["x"], [None], None, "").text_start("other") is None


def test_completion_logprobs_both_shapes():
    openai = parse_completion({"choices": [{"text": " a", "logprobs": {"tokens": [" a"], "token_logprobs": [-0.5],
                                                                       "top_logprobs": [{" a": -0.5}]}}]})
    llamacpp = parse_completion({"choices": [{"text": " a", "logprobs": {"content": [
        {"id": 9, "token": " a", "logprob": -0.5, "top_logprobs": [{"id": 9, "token": " a", "logprob": -0.5}]}]}}]})
    assert openai.tokens[0].logprob == llamacpp.tokens[0].logprob == -0.5
    assert llamacpp.tokens[0].token_id == 9 and llamacpp.tokens[0].top == {" a": -0.5}


def test_cut_ends_at_a_word():
    assert cut("one two three four", 9) == "one two"
    assert cut("short", 10) == "short"
    assert cut("日本語の文章です", 3) == "日本語"


def test_cli_without_model_on_a_dead_server(tmp_path):
    """`probe endpoint URL` needs no --model now: a dead server is EPT001, every other check skips."""
    import json

    from click.testing import CliRunner

    from llmdoctor.cli import cli
    from tests.endpoint_assets import free_port
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["probe", "endpoint", f"http://127.0.0.1:{free_port()}", "--timeout", "2",
                                      "--format", "json", "-o", str(out)])
    assert result.exit_code == 1, result.output
    data = json.loads(out.read_text())
    assert [f["check"] for f in data["findings"]] == ["EPT001"]
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses["EPT001"] == "failed" and {s for i, s in statuses.items() if i != "EPT001"} == {"skipped"}
    assert {"EPT061", "EPT062", "EPT063"} <= set(statuses)


def test_without_model_the_comparing_checks_skip_naming_it():
    report = run_endpoint(None, EndpointOptions("http://127.0.0.1:8000"), transport=FakeServer("vllm").transport(),
                          select=["EPT041", "EPT021"])
    assert {c.id: c.status for c in report.checks} == {"EPT021": "skipped", "EPT041": "skipped"}
    assert all("no --model given" in c.reason for c in report.checks)


def test_untrained_checkpoint_makes_the_findings_information(tmp_path):
    """With --model, a checkpoint that fails the same probes itself (a random tiny model) is the model's problem,
    not the deployment's: the server's nonsense is reported as information, never an error of this family."""
    from checks.endpoint.reference import Reference
    from reference_engine.testing.factory import build_model_dir
    model = build_model_dir(tmp_path / "tiny", "llama", seed=3)
    reference = Reference.load(model)
    report = run_endpoint(model, EndpointOptions("http://127.0.0.1:8000"), reference=reference,
                          transport=FakeServer("vllm", healthy=False).transport(), select=["EPT06"])
    assert {c.id: c.status for c in report.checks} == {"EPT061": "passed", "EPT062": "passed", "EPT063": "passed"}
    for finding in report.findings:
        assert finding.severity.value == "info" and "the checkpoint itself" in finding.message, finding.message
