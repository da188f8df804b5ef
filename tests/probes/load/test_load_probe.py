"""`probe load` end to end against a deterministic fake server (tests/load_servers.py), healthy and behind the
fault proxy: each injected fault gets its finding, the numbers are sane, the run is bounded, the CLI and the
HTML plot work. The same proxy in front of real servers: tests/probes/load/test_load_live.py."""
from __future__ import annotations

import json
import time

import pytest

from llmdoctor.run.load_probe import run_load_report
from probes.load import LoadOptions
from tests.endpoint_assets import free_port
from tests.load_servers import FaultProxy

SMALL = dict(concurrency=(1, 4), requests=8, max_tokens=8, duration_s=60, timeout_s=5, repeats=2)


def run(model, url, **kw):
    return run_load_report(model, url, LoadOptions(**{**SMALL, **kw}))


def worst(report, check):
    findings = report.findings_for(check)
    assert findings, f"no {check} finding: {[(f.check, f.message) for f in report.findings]}"
    return findings[0]


def errors(report):
    return sorted({f.check for f in report.findings if f.severity.value == "error"})


def test_healthy_fake_server_levels_and_no_error(model, fake):
    report = run(model, fake.url + "/v1", rates=(20.0,))
    assert errors(report) == []
    levels = report.load["levels"]
    assert [lv.get("concurrency") for lv in levels[:2]] == [1, 4] and levels[2]["rate"] == 20.0
    for lv in levels:
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert lv[key]["p50"] <= lv[key]["p90"] <= lv[key]["p99"], (key, lv)
        assert lv["errors"]["total"] == 0 and lv["completed"] == 8 and lv["peak_in_flight"] <= 4
        assert lv["output_tokens_per_s"] > 0 and lv["requests_per_s"] > 0 and lv["goodput"] is None
    assert levels[0]["peak_in_flight"] == 1
    assert report.load["correctness"]["loaded_answers"] == 6
    assert {c["kind"] for c in report.load["correctness"]["classes"]} == {"match"}
    plots = worst(report, "EPT101").data["plots"]
    assert plots[0]["title"] == "latency against load" and "TTFT p50" in plots[0]["series"]


def test_cross_talk_is_an_error(model, fake):
    with FaultProxy(fake.url, "crosstalk") as proxy:
        report = run(model, proxy.url)
    assert proxy.injected and worst(report, "EPT113").severity.value == "error"
    assert "another request's content" in worst(report, "EPT113").message


def test_corruption_under_load_names_the_tokens(model, fake):
    with FaultProxy(fake.url, "corrupt") as proxy:
        report = run(model, proxy.url)
    finding = worst(report, "EPT112")
    assert finding.severity.value == "error" and "under load" in finding.message
    assert "now ' banana'" in finding.message and "alone ' " in finding.message
    assert "EPT113" not in errors(report)


def test_near_tie_flip_is_not_corruption(model, fake):
    with FaultProxy(fake.url, "near-tie") as proxy:
        report = run(model, proxy.url)
    assert proxy.injected
    assert worst(report, "EPT111").severity.value in ("info", "warning")
    assert "flipped at a near tie" in worst(report, "EPT111").message
    assert errors(report) == []


@pytest.mark.parametrize("fault, words", [("5xx", "5xx responses"), ("drop", "dropped streams (no finish_reason)")])
def test_failed_requests_are_counted(model, fake, fault, words):
    with FaultProxy(fake.url, fault) as proxy:
        report = run(model, proxy.url, correctness=False)
    finding = worst(report, "EPT102")
    assert finding.severity.value == "error" and words in finding.message
    key = "http_5xx" if fault == "5xx" else "dropped_streams"
    assert finding.evidence["totals"][key] > 0 and report.load["levels"][1]["errors"][key] > 0


def test_stalled_server_is_timeouts_and_the_run_stays_bounded(model, fake):
    with FaultProxy(fake.url, "stall") as proxy:
        started = time.monotonic()
        report = run(model, proxy.url, timeout_s=2, duration_s=12, correctness=False)
        elapsed = time.monotonic() - started
    assert elapsed < 12 + 8, elapsed
    finding = worst(report, "EPT102")
    assert finding.evidence["totals"]["timeouts"] > 0 and "timeouts" in finding.message


def test_latency_cliff_and_goodput_collapse(model, fake):
    with FaultProxy(fake.url, "cliff") as proxy:
        report = run(model, proxy.url, correctness=False, timeout_s=20, slo_ttft_ms=400, slo_tpot_ms=200)
    levels = report.load["levels"]
    assert levels[0]["goodput"] >= 0.9 and levels[1]["goodput"] < 0.5
    jump = worst(report, "EPT104")
    assert jump.severity.value == "warning" and "goodput collapses" in jump.message and "TTFT" in jump.message
    assert worst(report, "EPT103").severity.value == "warning" and "cliff" in worst(report, "EPT103").message


def test_preemption_storm_in_metrics(model, fake):
    with FaultProxy(fake.url, "preemption") as proxy:
        report = run(model, proxy.url, correctness=False, concurrency=(1, 4), requests=12)
    finding = worst(report, "EPT105")
    assert finding.severity.value == "warning" and "preemption storm" in finding.message


def test_dead_port_is_ept001_and_the_rest_skipped(model):
    report = run(model, f"http://127.0.0.1:{free_port()}")
    assert worst(report, "EPT001").severity.value == "error"
    assert report.load is None
    assert {r.status for r in report.checks if r.id != "EPT001"} == {"skipped"}


def test_cli_json_and_html(model, fake, tmp_path):
    from click.testing import CliRunner

    from llmdoctor.cli import cli
    out = tmp_path / "load.json"
    args = ["probe", "load", fake.url, "--model", str(model), "--concurrency", "1,2", "--requests", "4",
            "--max-tokens", "6", "--repeats", "1", "--duration", "60"]
    result = CliRunner().invoke(cli, args + ["--format", "json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    body = json.loads(out.read_text())
    assert [lv["concurrency"] for lv in body["load"]["levels"]] == [1, 2]
    assert set(body["load"]["levels"][0]) >= {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tokens_per_s",
                                              "requests_per_s", "goodput", "errors"}
    html = tmp_path / "load.html"
    result = CliRunner().invoke(cli, args + ["--no-correctness", "--format", "html", "-o", str(html)])
    assert result.exit_code == 0 and "latency against load" in html.read_text()
    missing = CliRunner().invoke(cli, ["probe", "load", fake.url, "--model", str(tmp_path)])
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    bad = CliRunner().invoke(cli, args[:3] + ["--model", str(model), "--concurrency", "0,2"])
    assert bad.exit_code == 2 and "concurrency" in bad.output


def test_triage_load_puts_the_levels_in_the_bundle(model, fake, tmp_path):
    from llmdoctor.run.endpoint_runner import EndpointOptions
    from llmdoctor.incident_bundle.bundle import run_triage
    from llmdoctor.incident_bundle.parts import TRIAGE_LOAD
    result = run_triage(model, tmp_path / "bundle", device="cpu", kv_requests=50, bandwidth_bytes=1 << 20,
                        run_checks=False, endpoint=EndpointOptions(fake.url, timeout_s=10), load=True)
    body = json.loads((tmp_path / "bundle" / "report.json").read_text())
    assert [lv["concurrency"] for lv in body["load"]["levels"]] == list(TRIAGE_LOAD["concurrency"])
    assert body["load"]["options"]["requests"] == TRIAGE_LOAD["requests"]
    assert result.report.findings_for("EPT101") and len(result.report.findings_for("EPT001")) == 1


def test_a_server_that_dies_after_connecting_is_counted_not_raised(model):
    from checks.endpoint.load.inputs import LoadInputs
    from checks.endpoint.load.throughput import failed_requests
    from probes.endpoint import EndpointClient, Surface
    from probes.load import run_load
    surface = Surface(EndpointClient(f"http://127.0.0.1:{free_port()}"), "m")
    options = LoadOptions(**SMALL)
    started = time.monotonic()
    result = run_load(surface, options)
    assert time.monotonic() - started < 30
    assert result.metrics_error and all(s.outcome == "transport" for lv in result.levels for s in lv.samples)
    assert not result.solo and "stopped accepting connections" in result.skipped["correctness"]
    finding = list(failed_requests(LoadInputs("x", result, options)))[0]
    assert finding.severity == "error" and "connection errors" in finding.message
