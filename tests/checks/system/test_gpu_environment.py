"""GPU and ENV checks: registered, skipped without a GPU, and firing on recorded device states."""
from __future__ import annotations

import pytest

import checks
import llmdoctor
from checks.catalogue.registry import REGISTRY
from probes import nvml
from tests.probes import nvml_records as rec


@pytest.fixture
def model_dir(factory_model_dir):
    return factory_model_dir("llama")


def test_registered_with_their_families():
    checks.load_all()
    for check_id, category in [("GPU101", "gpu"), ("GPU102", "gpu"), ("GPU103", "gpu"), ("ENV001", "environment")]:
        assert REGISTRY[check_id].category == category and REGISTRY[check_id].doc


def test_gpu_checks_skip_without_a_cuda_device(model_dir, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    report = llmdoctor.check(model_dir, select=["gpu"], device="cpu")
    runs = {r.id: r for r in report.checks}
    assert {"GPU101", "GPU102", "GPU103"} <= set(runs)
    assert all(runs[i].status == "skipped" and "no CUDA device" in runs[i].reason for i in ("GPU101", "GPU102"))


def test_env001_passes_on_this_machine(model_dir):
    report = llmdoctor.check(model_dir, select=["ENV001"], device="cpu")
    [run] = report.checks
    assert run.id == "ENV001" and run.status in ("passed", "failed")
    if run.status == "failed":  # only on a machine whose torch really cannot use its GPUs
        assert report.findings[0].severity.value == "warning"


def test_env001_fires_when_nvml_sees_gpus_torch_cannot_use(model_dir, monkeypatch):
    monkeypatch.setattr(nvml, "PynvmlBackend", lambda: rec.fake(rec.H100_SXM))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("torch.version.cuda", None)
    report = llmdoctor.check(model_dir, select=["ENV001"], device="cpu")
    [finding] = report.findings
    assert finding.check == "ENV001" and finding.severity.value == "warning"
    assert finding.message == "NVML sees 1 GPU(s) but torch cannot use them (a CPU-only torch build)"


def test_gpu101_reports_each_device_problem(monkeypatch):
    from checks.system import gpu
    from probes.gpu_state import NvmlSession
    with NvmlSession(rec.fake(rec.A100_SXM4_40GB)) as session:
        state = session.read_device(0)
    monkeypatch.setattr(gpu, "nvml_state_of", lambda device: (state, ""))
    ctx = type("Ctx", (), {"gpu": "cuda:0"})()
    messages = [p.message for p in gpu.gpu_device_state(ctx)]
    assert messages == ["GPU 0: clocks throttled by sw_power_cap, hw_slowdown",
                        "GPU 0: PCIe link gen3 x16 below its max gen4 x16"]
