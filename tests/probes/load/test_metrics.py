"""/metrics: Prometheus text in vLLM's, TGI's and SGLang's names (from their docs and source) read by the load
findings; the parser, and the stream and statistics units under them.

The .prom files under metrics/ are hand-written, not recorded: none of these servers runs on the test machine
(no GPU). They are held to what a real exposition obeys (test_fixture_histograms_are_consistent): each
histogram's +Inf bucket equals its _count, buckets never decrease, _sum lies within what the buckets allow, and
counters never fall from one scrape to the next. A histogram recorded from what happened is in
test_queueing.py (EPT106 end to end)."""
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
PHASES = ("before", "mid", "after")


def scrapes(name: str, phases: list[str]) -> list[Scrape]:
    files = sorted(HERE.glob(f"{name}_*.prom"), key=lambda p: PHASES.index(p.stem.split("_")[1]))
    return [Scrape(float(i), phase, parse(p.read_text())) for i, (p, phase) in enumerate(zip(files, phases))]


def histograms(text: str) -> dict[tuple, dict]:
    """(name, labels without le) -> {"buckets": [(le, count)], "count", "sum"}, read with prometheus_client's
    own parser (an oracle independent of probes/load/metrics.py, which drops the buckets)."""
    from prometheus_client.parser import text_string_to_metric_families
    out: dict[tuple, dict] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            entry = out.setdefault((family.name, labels), {"buckets": []})
            if sample.name.endswith("_bucket"):
                entry["buckets"].append((float(sample.labels["le"]), sample.value))
            else:
                entry[sample.name.rsplit("_", 1)[1]] = sample.value
    return out


def counters(text: str) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text)
            if family.type in ("counter", "histogram") for s in family.samples}


@pytest.mark.parametrize("path", sorted(HERE.glob("*.prom")), ids=lambda p: p.name)
def test_fixture_histograms_are_consistent(path):
    found = histograms(path.read_text())
    assert found, "no histogram"
    for (name, _), h in found.items():
        bounds = sorted(h["buckets"])
        counts = [c for _, c in bounds]
        assert bounds[-1][0] == float("inf") and counts[-1] == h["count"], (name, h)
        assert counts == sorted(counts), (name, "buckets decrease", h)
        low = high = 0.0                       # the least and the most _sum the buckets allow
        previous_bound, previous_count = 0.0, 0.0
        for bound, count in bounds:
            if count > previous_count:         # (an empty +Inf bucket adds nothing, not inf * 0)
                low += (count - previous_count) * previous_bound
                high += (count - previous_count) * bound
            previous_bound, previous_count = bound, count
        assert low <= h["sum"] <= high, (name, low, h["sum"], high)


@pytest.mark.parametrize("server", ["vllm", "tgi", "sglang"])
def test_fixture_counters_never_fall_between_scrapes(server):
    files = sorted(HERE.glob(f"{server}_*.prom"), key=lambda p: PHASES.index(p.stem.split("_")[1]))
    scrapes = [counters(p.read_text()) for p in files]
    assert len(scrapes) >= 2
    for earlier, later in zip(scrapes, scrapes[1:]):
        assert earlier.keys() == later.keys()
        fell = {k: (earlier[k], later[k]) for k in earlier if later[k] < earlier[k]}
        assert not fell, fell


def level(label_concurrency: int, ttfts: list[float]) -> Level:
    lv = Level(concurrency=label_concurrency, requests=len(ttfts), wall_s=1.0)
    lv.samples = [Sample(f"r{i}", 0.0, OK, ttft_s=t, e2e_s=t + 1, output_tokens=10) for i, t in enumerate(ttfts)]
    return lv


@pytest.mark.parametrize("name, family", [("vllm", "vllm"), ("tgi", "tgi"), ("sglang", "sglang")])
def test_fixture_metrics_parse_and_name_their_server(name, family):
    values = parse((HERE / f"{name}_after.prom").read_text())
    assert server_family(values) == family
    assert not any(k.endswith("_bucket") for k in values)


def test_vllm_preemption_storm_from_fixture_scrapes():
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
