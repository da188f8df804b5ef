"""`llmdoctor probe bandwidth`: the host measurement here, the GPU arithmetic through recorded NVML values."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from probes.gpu_state import NvmlSession
from probes.bandwidth import (BandwidthResult, Measurement, achieved_finding, bandwidth_findings,
                                        gpu_problems, measure_kernels, nvml_finding, run_bandwidth_probe)
from probes.decode_roofline import RooflineResult, roofline_finding, run_decode_roofline, weights_read_per_step
from tests.probes import nvml_records as rec


@pytest.fixture
def tiny_model_dir(factory_model_dir):
    return factory_model_dir("llama")


def test_measurement_median_and_rate():
    m = Measurement("copy", 2_000_000_000, [2.0, 0.5, 1.0])
    assert m.median_s == 1.0 and m.bytes_per_s == 2e9 and m.as_dict()["gb_s"] == 2.0


def test_host_kernels_measure_and_verify():
    copy, triad = measure_kernels(torch.device("cpu"), 4 * 2**20, runs=3, warmup=1)
    assert (copy.kind, triad.kind) == ("copy", "triad")
    assert copy.bytes_per_run == 2 * 4 * 2**20 and triad.bytes_per_run == 3 * 4 * 2**20
    assert len(copy.times_s) == 3 and all(t > 0 for t in copy.times_s + triad.times_s)


def test_without_driver_the_cpu_is_measured_and_nvml_says_why():
    result = run_bandwidth_probe("cpu", 4 * 2**20, runs=2, nvml_backend=rec.no_library())
    nvml, achieved = bandwidth_findings(result)
    assert nvml.check == "GPU101" and nvml.message.startswith("skipped: NVML not available (NVML Shared Library")
    assert achieved.check == "GPU102" and achieved.message.startswith("host memory bandwidth on ")
    assert achieved.evidence["best_gb_s"] > 0 and achieved.data["plot"]["x"] == ["copy", "triad"]


def _gpu_result(record, best_bytes_per_s):
    with NvmlSession(rec.fake(record)) as session:
        snap = session.snapshot()
    per_run = 3 * 2**30
    return BandwidthResult("cuda:0", snap.gpus[0].name, snap, gpu=snap.gpus[0], measurements=[
        Measurement("copy", 2 * 2**30, [2 * 2**30 / (0.9 * best_bytes_per_s)] * 3),
        Measurement("triad", per_run, [per_run / best_bytes_per_s] * 3)])


def test_gpu_bandwidth_as_fraction_of_nvml_peak():
    healthy = achieved_finding(_gpu_result(rec.H100_SXM, 2.9e12))  # ~ what a triad reaches on an H100 SXM
    assert healthy.severity.value == "info"
    assert healthy.evidence["fraction_of_peak"] == pytest.approx(2.9e12 / 3.352e12, rel=1e-3)
    assert healthy.data["plot"]["hlines"]["NVML peak"] == pytest.approx(3352.3, abs=0.5)
    slow = achieved_finding(_gpu_result(rec.H100_SXM, 1.9e12))
    assert slow.severity.value == "warning" and "below DCGM's 75% pass mark" in slow.hint


def test_nvml_problems_from_recorded_states():
    with NvmlSession(rec.fake(rec.A100_SXM4_40GB, rec.H100_SXM)) as session:
        a100, h100 = session.snapshot().gpus
    problems = gpu_problems(a100)
    assert "GPU 0: clocks throttled by sw_power_cap, hw_slowdown" in problems
    assert "GPU 0: PCIe link gen3 x16 below its max gen4 x16" in problems
    assert gpu_problems(h100) == []
    finding = nvml_finding(_gpu_result(rec.A100_SXM4_40GB, 1.2e12))
    assert finding.severity.value == "warning" and finding.evidence["problems"] == problems


def test_roofline_verdicts():
    def result(step_s, measured_bw=1e12, measured_flops=1e14):
        return RooflineResult("m", "cuda:0", "bfloat16", int(14e9), 0, 14e9, [step_s] * 5, 64, measured_bw,
                              measured_flops)
    assert result(0.016).verdict == "memory-bandwidth bound"      # 14 GB in 16 ms = 875 GB/s of 1 TB/s
    assert result(0.5, measured_flops=4e10).verdict == "compute bound"  # 28 GFLOP/s of 40
    assert result(0.5).verdict == "overhead bound (kernel launch, Python)"
    assert "memory-bandwidth bound" in roofline_finding(result(0.016)).message


def test_weights_read_per_step_is_every_weight_but_the_embedding_table(tiny_model_dir):
    from reference_engine.engine import Engine
    from reference_engine.files.weights import Weights
    engine = Engine.from_pretrained(tiny_model_dir)
    weights = Weights.open(tiny_model_dir)
    assert not engine.config.tie_word_embeddings and weights.info("lm_head.weight").dtype == "F32"
    total = sum(weights.info(n).nbytes for n in weights.names)  # float32 on disk and in the engine
    embed = engine.weights.embed
    nbytes, flops = weights_read_per_step(engine)
    assert nbytes == total - embed.numel() * 4 + embed.shape[1] * 4
    matrices = sum(int(torch.tensor(weights.info(n).shape).prod()) for n in weights.names
                   if len(weights.info(n).shape) == 2 and "embed_tokens" not in n)
    assert flops == 2.0 * matrices


def test_decode_roofline_on_a_tiny_model(tiny_model_dir):
    r = run_decode_roofline(tiny_model_dir, measured_bytes_per_s=5e9, steps=6)
    assert len(r.step_times_s) == 4 and r.context_tokens == 32 + 6
    assert r.verdict == "overhead bound (kernel launch, Python)"  # a few hundred KB per step cannot fill DRAM
    assert roofline_finding(r).evidence["tokens_per_s"] > 0


def test_cli_probe_bandwidth(tiny_model_dir):
    from llmdoctor.commands.probe import probe
    result = CliRunner().invoke(probe, ["bandwidth", "--device", "cpu", "--size", "4MiB", "--runs", "2",
                                        "--model", str(tiny_model_dir), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [f["check"] for f in report["findings"]] == ["GPU101", "GPU102", "GPU103"]
    bad = CliRunner().invoke(probe, ["bandwidth", "--size", "huge"])
    assert bad.exit_code == 2 and "invalid memory size" in bad.output
