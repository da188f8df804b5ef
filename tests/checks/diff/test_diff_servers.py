"""`diff URL_A URL_B` on fake servers (tests/checks/diff/server_fakes.py): each difference the DIF07x checks claim
to see, planted on one side, and the identical pair quiet; the pure comparisons; the one-line errors."""
from __future__ import annotations

import math
import random

import httpx
import pytest

from checks.diff.servers.compare import divergence, kl_by_position, margin, top_kl, visible
from checks.diff.servers.inputs import ServerOptions
from llmdoctor.run.server_diff import ServerDiffError, ServerDiffOptions, run_server_diff
from probes.endpoint import TokenLogprob
from tests.checks.diff.server_fakes import FakeServer

URL_A, URL_B = "http://a.test:8000", "http://b.test:8000/v1"


def diff(a: FakeServer, b: FakeServer, **kwargs):
    options = ServerDiffOptions(ServerOptions(prompts=2, max_tokens=6))
    return run_server_diff(URL_A, URL_B, options, transports=(a.transport(), b.transport()), **kwargs)


def loud(report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in report.findings:
        if f.severity.value in ("warning", "error"):
            out.setdefault(f.check, []).append(f.message)
    return out


def test_identical_servers_are_quiet_and_say_so():
    report = diff(FakeServer(), FakeServer())
    assert loud(report) == {}
    assert {c.id: c.status for c in report.checks} == {"DIF070": "passed", "DIF071": "passed", "DIF072": "passed",
                                                      "DIF073": "passed"}
    messages = {f.check: f.message for f in report.findings}
    assert messages["DIF070"] == "all 2 greedy answers are identical token for token"
    assert messages["DIF071"].startswith("near-equal: top-logprob KL mean 0.000000 (reference || candidate), "
                                         "0.000000 (candidate || reference)")
    assert report.exit_code("warning") == 0
    assert report.model == "http://a.test:8000 vs http://b.test:8000"


def test_a_confident_flip_is_a_real_difference_with_both_margins():
    report = diff(FakeServer(), FakeServer(flip_at=2))
    found = [f for f in report.findings if f.check == "DIF070"]
    assert [f.severity.value for f in found] == ["warning", "warning"]
    margin_nats = math.log(0.6 / 0.3)
    assert found[0].message.endswith(f"answers part at token 3: reference ' charlie' vs candidate ' delta' (margins: "
                                     f"reference {margin_nats:.3f} nats, candidate {margin_nats:.3f} nats)")
    assert found[0].evidence["common"] == " alpha bravo"
    kl = [f for f in report.findings if f.check == "DIF071"][0]
    row = kl.evidence["by_prompt"][0]              # the KL of the swapped pair at the flip: (0.6 - 0.3) ln 2
    assert row["positions"] == 3 and row["max_at"] == row["max_at_reversed"] == 2
    assert row["max_kld"] == row["max_kld_reversed"] == pytest.approx(0.3 * math.log(2), abs=1e-6)
    assert kl.severity.value == "warning"          # mean 0.069 over the three positions: above 0.05


def test_a_near_tie_that_flipped_is_info():
    report = diff(FakeServer(p_pick=0.4, p_next=0.36), FakeServer(p_pick=0.4, p_next=0.36, flip_at=0))
    found = [f for f in report.findings if f.check == "DIF070"]
    assert [f.severity.value for f in found] == ["info", "info"]
    assert found[0].message.startswith("near tie flipped: ")


def test_prompt_counts_differ_by_the_extra_token_on_both_routes():
    report = diff(FakeServer(), FakeServer(extra_prompt_tokens=1))
    found = loud(report)["DIF072"]
    assert len(found) == 4 and all("candidate" in m for m in found)
    assert "(chat): reference counts 10 prompt tokens, candidate 11" in found[0]


def test_tool_and_structured_output_parity():
    report = diff(FakeServer(), FakeServer(call_arguments={"city": "Paris", "unit": "fahrenheit"},
                                           refuse_format=True))
    assert loud(report)["DIF073"] == [
        "tool call: the same tools called with other arguments",
        "structured output: only the candidate refuses it (POST /v1/chat/completions: HTTP 400: response_format "
        "json_schema not supported)"]
    report = diff(FakeServer(call_arguments=None), FakeServer())
    assert loud(report)["DIF073"] == ["tool call: tool calls [] vs ['get_weather']; content differs"]
    report = diff(FakeServer(refuse_format=True), FakeServer(refuse_format=True))
    assert "DIF073" not in loud(report)
    assert any(f.message == "structured output: both servers refuse it" for f in report.findings)


def test_no_logprobs_skips_the_kl_and_compares_text():
    report = diff(FakeServer(logprobs=False), FakeServer())
    statuses = {c.id: (c.status, c.reason) for c in report.checks}
    assert statuses["DIF071"] == ("skipped", "the reference server returned no logprobs")
    assert statuses["DIF070"][0] == "failed"       # one piece of text against six tokens: the first token differs
    first = [f for f in report.findings if f.check == "DIF070"][0]
    assert "reference unknown (no logprobs)" in first.message


def test_select_runs_only_the_named_check():
    report = diff(FakeServer(), FakeServer(), select=["DIF072"])
    assert [c.id for c in report.checks] == ["DIF072"]


def test_unreachable_and_non_openai_servers_are_one_line_errors():
    def refused(request):
        raise httpx.ConnectError("connection refused", request=request)
    options = ServerDiffOptions(ServerOptions(prompts=1, max_tokens=2), timeout_s=1)
    with pytest.raises(ServerDiffError) as e:
        run_server_diff(URL_A, URL_B, options, transports=(FakeServer().transport(), httpx.MockTransport(refused)))
    assert str(e.value).startswith("http://b.test:8000/v1: not an OpenAI-compatible server that answers (GET "
                                   "/v1/models: ConnectError: connection refused)")
    assert "\n" not in str(e.value)
    with pytest.raises(ServerDiffError) as e:
        run_server_diff(URL_A, URL_B, options, transports=(FakeServer(models_status=404).transport(), None))
    assert str(e.value).startswith("http://a.test:8000: not an OpenAI-compatible server that answers (GET /v1/models: "
                                   "HTTP 404")
    with pytest.raises(ServerDiffError) as e:
        run_server_diff(URL_A, URL_B, options, transports=(FakeServer().transport(),
                                                           FakeServer(models_html=True).transport()))
    assert str(e.value) == ("http://b.test:8000/v1: not an OpenAI-compatible server that answers (GET /v1/models: "
                            "HTTP 200 but the body is not JSON: '<html>a web page</html>'); give the root (or /v1) URL "
                            "of an OpenAI-compatible server")


def test_a_server_that_lists_models_but_answers_no_chat():
    """An API that lists models and has no chat route (an embeddings server): DIF070 says which side failed."""
    class NoChat(FakeServer):
        def chat(self, body):
            return httpx.Response(404, json={"error": {"message": "no chat here"}})
    report = diff(FakeServer(), NoChat())
    found = loud(report)["DIF070"]
    assert found[0] == ("'The capital of France is': no greedy answer to compare (candidate: POST "
                        "/v1/chat/completions: HTTP 404: no chat here)")
    assert {c.id: c.status for c in report.checks}["DIF071"] == "skipped"


# ------------------------------------------------------------------------------------------- the comparisons

def tok(piece: str, lp: float, **top: float) -> TokenLogprob:
    return TokenLogprob(piece, lp, {piece: lp, **{k.replace("_", " "): v for k, v in top.items()}})


def test_margin_exact_bounded_and_unknown():
    t = tok(" a", -0.5, _b=-1.5)
    assert margin(t, " b").nats == pytest.approx(1.0) and margin(t, " b").exact
    bound = margin(t, " c")
    assert not bound.exact and bound.nats == pytest.approx(1.0) and bound.describe().startswith("> 1.000 nats")
    assert margin(TokenLogprob(" a", None), " b").nats is None
    assert margin(t, None).describe() == "unknown (no logprobs)"


def test_divergence_ignores_a_trailing_invisible_stop_token():
    a = [tok(" a", -0.1), tok(" b", -0.1), tok("", -0.1)]      # llama-server lists the end-of-turn token as ""
    b = [tok(" a", -0.1), tok(" b", -0.1)]
    assert divergence(a, " a b", b, " a b") is None
    assert len(visible(a)) == 2
    ended = divergence(a, " a b", b[:1], " a")
    assert ended.step == 1 and ended.cand_piece is None and ended.shown(ended.cand_piece) == "<end of answer>"


def test_top_kl_is_a_lower_bound_of_the_full_kl_and_zero_when_equal():
    p = [0.5, 0.2, 0.15, 0.1, 0.05]
    q = [0.1, 0.3, 0.3, 0.2, 0.1]          # Q's top three are b, c, d: "a" lies below them
    full = sum(x * math.log(x / y) for x, y in zip(p, q))
    keys = ["a", "b", "c", "d", "e"]
    top_p = {k: math.log(x) for k, x in zip(keys[:3], p[:3])}     # each side lists its top three
    top_q = {k: math.log(x) for k, x in zip(keys[1:4], q[1:4])}
    bound = top_kl(top_p, top_q)
    assert 0 < bound <= full
    assert top_kl(top_p, top_p) == pytest.approx(0.0, abs=1e-12)
    disjoint = top_kl({"a": math.log(0.9)}, {"b": math.log(0.9)})     # Q gives "a" at most its 0.1 left over
    assert disjoint == pytest.approx(0.8 * math.log(0.9 / 0.1), rel=1e-9)
    assert top_kl({}, top_q) is None


def test_top_kl_never_exceeds_the_full_kl_on_random_distributions():
    rng = random.Random(0)
    for _ in range(500):
        n, k = rng.randint(2, 12), rng.randint(1, 5)
        p = [rng.random() ** 4 for _ in range(n)]
        q = [x * math.exp(rng.gauss(0, rng.choice((0.01, 0.5, 3)))) for x in p]
        p, q = [x / sum(p) for x in p], [x / sum(q) for x in q]
        full = sum(x * math.log(x / y) for x, y in zip(p, q))
        top = lambda d: {str(i): math.log(d[i]) for i in sorted(range(n), key=lambda i: -d[i])[:k]}  # noqa: E731
        assert top_kl(top(p), top(q)) <= full + 1e-12
    same = [tok(" a", math.log(0.6), _b=math.log(0.3))] * 3
    assert kl_by_position(same, same, None) == pytest.approx([0.0] * 3, abs=1e-12)
    assert len(kl_by_position(same, same, 0)) == 1
