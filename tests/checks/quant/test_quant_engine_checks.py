"""Quantized directories through the whole tool: `check` runs every model check on them (no format error, no
skip for want of weights or an engine), `diff BASE QUANT` measures how far and where, and a packing-order
mix-up no file check can see (AWQ's interleave) surfaces in the golden drift check and in the diff."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmdoctor.run.baseline_recording import record, save
from llmdoctor.run.diff_runner import run_diff
from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes, problems
from tests.checks.zoo_quant import awq, quantize_dir
from tests.quant_builders import build_variant

NEEDS_SKIPS = ("needs weights", "needs engine", "needs config", "needs tokenizer")


@pytest.fixture(scope="module")
def base(factory_model_dir):
    return factory_model_dir("llama")


@pytest.mark.parametrize("variant", ["gptq_v1_b4_g32_asym_descact", "bnb_nf4_dq"])
def test_check_runs_every_model_check_on_a_quantized_dir(variant, base, tmp_path):
    d = build_variant(variant, base, tmp_path / "model").path
    report = run_checks(d, device="cpu", quick=True)
    no_crashes(report)
    assert problems(report) == []
    starved = [(c.id, c.reason) for c in report.checks
               if c.status == "skipped" and c.reason.startswith(NEEDS_SKIPS)]
    assert starved == []
    ran = {c.id for c in report.checks if c.status == "passed"}
    assert {"WGT001", "GLD002", "GLD003", "GEN001", "QNT002", "QNT006"} <= ran


def diff_numbers(report) -> tuple[float, float, list]:
    kld = next(f for f in report.findings if f.check == "DIF030")
    weights = next(f for f in report.findings if f.check == "DIF020" and f.severity.value == "info")
    return kld.evidence["kld_mean"], kld.evidence["same_top"], weights.evidence


@pytest.mark.parametrize("variant", ["gptq_v1_b4_g32_sym", "ct_w4a16_group_asym"])
def test_diff_against_a_quantized_copy(variant, base, tmp_path):
    build = build_variant(variant, base, tmp_path / "model")
    report = run_diff(base, build.path, device="cpu", quick=True)
    no_crashes(report)
    assert not [c for c in report.checks if c.status == "skipped" and c.id in ("DIF020", "DIF030", "DIF040")]
    kld, top1, weights = diff_numbers(report)
    assert 0 < kld < 1e-3 and top1 > 0.8
    assert weights["quantized"] == len(build.quantized) == weights["differing"]
    assert all(p["stored"] and p["worst_nmse_db"] < -15 for p in weights["by_part"])
    assert not [f for f in report.findings if f.check in ("DIF020", "DIF021") and f.severity.value != "info"]
    where = next(f for f in report.findings if f.check == "DIF040" and f.evidence.get("first_own_crossing"))
    assert where.evidence["first_own_crossing"]


def test_awq_packing_order_mixup_surfaces_in_golden_drift_and_diff(base, tmp_path):
    """qweight packed in natural order but declared AutoAWQ gemm: every file check passes, the weights are
    permuted within each 8 columns; the golden drift check against the float model's baseline and the diff
    both see it, far beyond what the healthy AWQ copy drifts."""
    good = quantize_dir(base, tmp_path / "good", "awq")
    mixed = quantize_dir(base, tmp_path / "mixed", "awq", quantize=lambda w: awq(w, order=range(8)))
    assert problems(run_checks(mixed, select=["QNT"])) == []
    golden = save(record(base, device="cpu", quick=True), tmp_path / "golden.json", base)
    drift = {name: run_checks(d, select=["DRF001"], device="cpu", quick=True, baseline=golden)
             for name, d in (("good", good), ("mixed", mixed))}
    # the tiny random model's logits are nearly flat, so even 4-bit rounding flips some top-1 tokens: both
    # drift, the mix-up by orders of magnitude more in KL
    max_kl = {name: max((p["max_kl"] for f in r.findings if f.check == "DRF001" for p in f.evidence["probes"]),
                        default=0.0) for name, r in drift.items()}
    assert [f for f in drift["mixed"].findings if f.check == "DRF001" and f.severity.value == "error"]
    assert max_kl["mixed"] > 20 * max_kl["good"], max_kl
    kld_good, top1_good, _ = diff_numbers(run_diff(base, good, device="cpu", quick=True, select=["DIF020", "DIF030"]))
    mixed_report = run_diff(base, mixed, device="cpu", quick=True, select=["DIF020", "DIF030"])
    kld_mixed, top1_mixed, _ = diff_numbers(mixed_report)
    assert kld_mixed > 20 * kld_good and top1_mixed < top1_good - 0.3
    assert len([f for f in mixed_report.findings if f.check == "DIF020" and f.severity.value == "warning"]) == 14


def test_cli_diff_of_a_quantized_dir(base, tmp_path):
    d = build_variant("ct_fp8_channel", base, tmp_path / "model").path
    out = subprocess.run([sys.executable, "-m", "llmdoctor", "diff", str(base), str(d), "--quick", "--device", "cpu",
                          "--format", "json", "--select", "DIF020,DIF021,DIF030"],
                         capture_output=True, text=True, timeout=300)
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert {f["check"] for f in report["findings"]} >= {"DIF020", "DIF030"}


@pytest.mark.assets
def test_smollm2_gptq_passes_check(smollm2_dir, tmp_path):
    """The real SmolLM2-135M-Instruct, its decoder linears GPTQ 4-bit g32 (v1, symmetric): `check --quick`
    runs every model check with no warning or error, and nothing is written into the directory."""
    d = quantize_dir(smollm2_dir, tmp_path / "smollm2-gptq", "gptq")
    before = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in d.iterdir())
    report = run_checks(d, device="cpu", quick=True)
    no_crashes(report)
    assert problems(report) == []
    assert not [c.id for c in report.checks if c.status == "skipped" and c.reason.startswith(NEEDS_SKIPS)]
    summary = next(f for f in report.findings if f.check == "QNT012")
    assert summary.evidence["layouts"] == {"packed-int": 30 * 7}
    assert sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in d.iterdir()) == before
