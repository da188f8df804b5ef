"""`probe endpoint URL --context N` by route (checks/endpoint/context_echo.py) on the fake servers
of the competence probes (tests/probes/endpoint/competence_fakes.py), in each server's answer shapes: a server
that scores prompts (vLLM's echo) is read through its prompt logprobs, one that does not (llama.cpp, an OpenAI
server refusing echo) by greedy retrieval, and the findings say which; a toy that sees only 200 tokens back is
caught on the echo route with the distance named. The live runs (llama-cpp-python, llama-server) are in
test_context_reading.py. A few seconds in all."""
from __future__ import annotations

import pytest

from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from probes.endpoint.context_probe import ECHO, GREEDY, copy_spans, pair_score
from tests.probes.endpoint.competence_fakes import FakeServer

IDS = ["EPT121", "EPT122", "EPT123"]


def probe(server: FakeServer, tokens: int = 1024):
    report = run_endpoint(None, EndpointOptions("http://127.0.0.1:8000/v1", context=tokens),
                          transport=server.transport(), select=IDS)
    assert not [c for c in report.checks if c.status == "crashed"]
    bad = {f.check: f for f in report.findings if f.severity.value in ("warning", "error")}
    return report, bad


def echo_requests(server: FakeServer) -> int:
    return sum(1 for s in server.seen if s["route"] == "/v1/completions" and s["body"].get("echo"))


@pytest.mark.parametrize("kind, route", [("vllm", ECHO), ("llama.cpp", GREEDY), ("openai", GREEDY)])
def test_healthy_server_is_clean_on_its_route(kind, route):
    server = FakeServer(kind)
    report, bad = probe(server)
    assert bad == {}, [f.message for f in bad.values()]
    reading = report.findings_for("EPT122")[0]
    assert reading.severity.value == "info" and reading.evidence["route"] == route
    assert f"(route: {route})" in reading.message
    rows = reading.evidence["server"]
    assert len(rows) == 5 and rows[-1]["distance"] > 500
    if route == ECHO:        # one small request decides, then one scored prompt per distance, nothing generated
        assert echo_requests(server) == 1 + len(rows)
        assert all(r["copy_ratio"] == pytest.approx(0.2 / 2.5, abs=0.01) for r in rows)
    else:
        assert all(r["matched"] == 4 for r in rows) and reading.evidence["why_greedy"]
        assert echo_requests(server) == (1 if kind == "openai" else 0)    # llama.cpp is known to have none


def test_server_reading_200_tokens_back_is_caught_on_the_echo_route():
    report, bad = probe(FakeServer("vllm", window=200))
    found = bad["EPT122"]
    assert found.severity.value == "error" and found.evidence["route"] == ECHO
    rows = {r["distance"]: r for r in found.evidence["server"]}
    fails = found.evidence["fails_at"]
    assert rows[fails]["copy_ratio"] == pytest.approx(1.0) and rows[64]["copy_ratio"] < 0.5
    assert f"not {fails}: copy ratio 1.00" in found.message
    assert "EPT123" not in bad          # the prompts reached it whole


class MiddleCutServer(FakeServer):
    """The fake behind a gateway that drops the middle third of prompts over 2000 characters."""

    def completion(self, body: dict):
        prompt = body["prompt"]
        if len(prompt) > 2000:
            third = len(prompt) // 3
            body = {**body, "prompt": prompt[:third] + prompt[2 * third:]}
        return super().completion(body)


def test_a_cut_prompt_is_caught_by_its_echo_with_the_distance():
    report, bad = probe(MiddleCutServer("vllm"))
    found = bad["EPT123"]
    rows = {r["distance"]: r for r in found.evidence["server"]}
    first_cut = found.evidence["distance"]
    assert found.evidence["route"] == ECHO and f"planting words {first_cut} tokens back" in found.message
    assert "does not spell the text sent" in found.message
    assert rows[64]["copy_ratio"] < 0.5 and first_cut > 64         # the short prompts reach it whole
    assert "EPT122" not in bad        # both showings survive the cut (the distance shrinks): the echo tells


def test_copy_spans_need_both_showings_cut_alike():
    planted = "stone towards questions hundred always affects over bakery change morning"
    pieces = ["<s>", "Lead", " text", "\n\n"] + [w if i == 0 else " " + w for i, w in enumerate(planted.split())]
    gap = ["\n\n", "Filler", " here", "\n\n\n"]
    second = ["\n\nstone"] + pieces[5:]                  # its first token holds the whitespace: never scored
    assert copy_spans(pieces + gap + second, planted) == (4, len(pieces) + len(gap), 10)
    assert copy_spans(pieces[:4] + gap + second, planted) is None      # the first showing was cut away
    score, why = pair_score(pieces + gap + second, [-5.0] * 40, planted)
    assert score is not None and score.ratio == pytest.approx(1.0) and why == ""


class StopNotEchoed(FakeServer):
    """llama-cpp-python's way when the one generated token is a stop: counted in usage, left out of the echo."""

    def completion(self, body: dict):
        answer = super().completion(body)
        if body.get("echo"):
            lp = answer["choices"][0]["logprobs"]
            lp["tokens"], lp["token_logprobs"] = lp["tokens"][:-1], lp["token_logprobs"][:-1]
            answer["choices"][0]["text"] = body["prompt"]
        return answer


def test_a_stop_token_left_out_of_the_echo_keeps_the_prompt_whole():
    report, bad = probe(StopNotEchoed("vllm"))
    assert bad == {}, [f.message for f in bad.values()]
    assert all(r["copy_ratio"] < 0.5 for r in report.findings_for("EPT122")[0].evidence["server"])
