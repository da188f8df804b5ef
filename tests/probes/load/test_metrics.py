"""/metrics: recorded Prometheus text of vLLM, TGI and SGLang (names from their docs and source) read by the
load findings; the parser, and the stream and statistics units under them."""
from __future__ import annotations

from pathlib import Path

import pytest

from checks.endpoint.load.compare import first_divergence
from checks.endpoint.load.server_metrics import preemptions, queue_share
from probes.endpoint.types import TokenLogprob
from probes.load.metrics import parse, server_family
from probes.load.stats import percentile, summarize
from probes.load.types import OK, Level, ProbeAnswer, Sample, Scrape

HERE = Path(__file__).parent / "metrics"


def scrapes(name: str, phases: list[str]) -> list[Scrape]:
    files = sorted(HERE.glob(f"{name}_*.prom"), key=lambda p: ("before", "mid", "after").index(p.stem.split("_")[1]))
    return [Scrape(float(i), phase, parse(p.read_text())) for i, (p, phase) in enumerate(zip(files, phases))]


def level(label_concurrency: int, ttfts: list[float]) -> Level:
    lv = Level(concurrency=label_concurrency, requests=len(ttfts), wall_s=1.0)
    lv.samples = [Sample(f"r{i}", 0.0, OK, ttft_s=t, e2e_s=t + 1, output_tokens=10) for i, t in enumerate(ttfts)]
    return lv


@pytest.mark.parametrize("name, family", [("vllm", "vllm"), ("tgi", "tgi"), ("sglang", "sglang")])
def test_recorded_metrics_parse_and_name_their_server(name, family):
    values = parse((HERE / f"{name}_after.prom").read_text())
    assert server_family(values) == family
    assert not any(k.endswith("_bucket") for k in values)


def test_vllm_preemption_storm_from_recorded_scrapes():
    found = preemptions(scrapes("vllm", ["idle", "concurrency 64", "concurrency 64"]))
    assert found["server"] == "vllm" and found["preemptions"] == 200
    assert found["kv_usage_max"] == pytest.approx(0.99) and found["waiting_max"] == 57 and found["storm"]


def test_sglang_without_retractions_is_no_storm():
    found = preemptions(scrapes("sglang", ["idle", "concurrency 32"]))
    assert found["preemptions"] == 0 and not found["storm"]


def test_tgi_queue_time_dominates_client_ttft():
    lv = level(8, [1.6] * 16)
    rows = queue_share(scrapes("tgi", ["idle", "concurrency 8"]), [lv], [summarize(lv)])
    assert rows[0]["queue_ms"] == pytest.approx(1500.0) and rows[0]["queue_share"] == pytest.approx(1500 / 1600)
    assert rows[0]["waiting_max"] == 23


def test_vllm_queue_share_per_level():
    lv = level(64, [2.0] * 10)
    rows = queue_share(scrapes("vllm", ["idle", "concurrency 64", "concurrency 64"]), [lv], [summarize(lv)])
    assert rows[0]["queue_ms"] == pytest.approx(1800.0)    # (180.8 - 0.8) s over 100 requests


def test_percentiles_are_ordered_and_interpolated():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5) and percentile(values, 99) == pytest.approx(99.01)
    lv = level(4, [0.1, 0.5, 0.2, 0.9])
    s = summarize(lv)
    assert s["ttft_ms"]["p50"] <= s["ttft_ms"]["p90"] <= s["ttft_ms"]["p99"]
    assert s["goodput"] is None and summarize(lv, slo_ttft_ms=300)["goodput"] == 0.5


def answer(tokens: list[tuple[str, dict]]) -> ProbeAnswer:
    text = "".join(t for t, _ in tokens)
    return ProbeAnswer("p", "solo", text, [TokenLogprob(t, top.get(t), top) for t, top in tokens])


def test_near_tie_needs_each_token_in_the_others_top_k_with_a_small_gap():
    base = answer([(" a", {" a": -0.1}), (" b", {" b": -0.60, " c": -0.70})])
    flip = answer([(" a", {" a": -0.1}), (" c", {" c": -0.65, " b": -0.66})])
    far = answer([(" a", {" a": -0.1}), (" z", {" z": -0.01})])
    wide = answer([(" a", {" a": -0.1}), (" c", {" c": -0.1, " b": -6.0})])
    d = first_divergence(base, flip)
    assert (d.kind, d.position, d.base_token, d.other_token) == ("near-tie", 1, " b", " c")
    assert first_divergence(base, far).kind == "corruption"
    assert first_divergence(base, wide).kind == "corruption"      # in the top-k, but 5.9 nats apart
    assert first_divergence(base, base).kind == "match"


def test_an_answer_that_ends_early_at_a_near_tie_end_token_is_a_flip():
    base = answer([(" a", {" a": -0.1}), (" b", {" b": -0.5, "<|im_end|>": -0.6})])
    ended = answer([(" a", {" a": -0.1})])
    ended.finish_reason = "stop"
    assert first_divergence(base, ended).kind == "near-tie"
    base.tokens[1].top = {" b": -0.1, "<|im_end|>": -7.0}
    assert first_divergence(base, ended).kind == "corruption"
