"""The CTX run's machinery on tiny factory models (a second or two each): the chunked prefill through the paged
cache gives the log-probs one prefill gives (sliding windows included), --quick skips unless asked, --context
reads to N, and a model too small to judge is measured, not judged."""
from __future__ import annotations

import math

import pytest

from checks.shared.chunked_prefill import chunk_tokens, chunked_logprobs
from llmdoctor.cli import DEMO_MODEL
from llmdoctor.run.runner import run_checks
from probes.competence import token_logprobs
from reference_engine.engine import Engine
from tests.checks.conftest import no_crashes


@pytest.mark.parametrize("preset", ["llama", "gemma3", "mistral"])
def test_chunked_prefill_equals_one_prefill(preset, factory_model_dir):
    overrides = {"sliding_window": 24} if preset == "mistral" else {}
    engine = Engine.from_pretrained(factory_model_dir(preset, **overrides))
    ids = [(7 * i + 3) % engine.config.vocab_size for i in range(200)]
    whole = token_logprobs(engine.logits(ids), ids)
    for chunk in (7, 64):
        parts = chunked_logprobs(engine, ids, chunk)
        assert len(parts) == len(whole) == len(ids) - 1
        assert max(abs(a - b) for a, b in zip(parts, whole)) < 1e-4
    assert engine.cache.allocator.num_free == engine.cache.allocator.num_blocks     # scratch freed


def test_chunk_keeps_logits_small():
    assert chunk_tokens(49152, False) == 682 and chunk_tokens(262144, False) == 128
    assert chunk_tokens(262144, True) == 512 and chunk_tokens(10, False) == 1024


def test_quick_skips_unless_asked_and_context_reads_to_n():
    """The demo model (512 positions, 0.9M parameters, a real tokenizer): a second or two. Under --quick the CTX
    checks skip when nothing asked for them (ALL), and run when a selector names them; --context N reads to N."""
    from findings import CATEGORIES
    unasked = run_checks(DEMO_MODEL, quick=True, ignore=[c for c in CATEGORIES if c != "context"])
    assert {c.status for c in unasked.checks} == {"skipped"}
    assert "--quick skips" in unasked.checks[0].reason
    report = run_checks(DEMO_MODEL, select=["CTX"], quick=True, context=512)
    no_crashes(report)
    info = next(f for f in report.findings if f.check == "CTX003")
    assert 400 < info.evidence["tokens"] <= 512 and report.plan["kv_tokens"] >= 512
    # a 0.9M-parameter model: whatever it reads, never a warning or an error
    assert all(f.severity.value == "info" for f in report.findings)
    assert all(math.isfinite(c["copy_ratio"]) for c in info.evidence["copies"])


def test_streamed_reading_matches_resident(monkeypatch):
    """Under --memory-budget a streamed engine reads the same prompt chunk by chunk (one pass over the weights per
    chunk): the same copy ratios and passage losses as resident. The demo model: a few seconds."""
    def reach(report):
        no_crashes(report)
        info = next(f for f in report.findings if f.check == "CTX003").evidence
        return [c["copy_ratio"] for c in info["copies"]] + [p["loss"] for p in info["passages"]]

    resident = run_checks(DEMO_MODEL, select=["CTX"], context=512, memory_budget="64GiB")
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    streamed = run_checks(DEMO_MODEL, select=["CTX"], context=512, memory_budget="64GiB")
    assert streamed.plan["mode"] == "streaming" and streamed.plan["actual"]["passes"] > 0
    assert reach(streamed) == pytest.approx(reach(resident), abs=2e-3)


def test_cli_context_option():
    """`check --demo --context N` reads to N; a bad N is a one-line usage error (the demo model: a second)."""
    import json

    from click.testing import CliRunner

    from llmdoctor.cli import cli
    runner = CliRunner()
    done = runner.invoke(cli, ["check", "--demo", "--select", "CTX003", "--context", "512", "--format", "json"])
    assert done.exit_code == 0, done.output
    info = next(f for f in json.loads(done.stdout)["findings"] if f["check"] == "CTX003")
    assert 400 < info["evidence"]["tokens"] <= 512
    bad = runner.invoke(cli, ["check", "--demo", "--context", "12"])
    assert bad.exit_code == 2 and "--context" in bad.output
