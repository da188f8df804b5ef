"""The NVML boundary: every path a real machine can take, through FakeNvml and a stub pynvml."""
from __future__ import annotations

import sys
import types

import pytest

from probes import nvml
from probes.gpu_state import NvmlSession, UtilSampler, decode_throttle
from tests.probes import nvml_records as rec


def snapshot_of(backend):
    with NvmlSession(backend) as session:
        return session.snapshot()


@pytest.mark.parametrize("backend, code, words", [
    (rec.no_library(), nvml.LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
    (rec.driver_not_loaded(), nvml.DRIVER_NOT_LOADED, "Driver Not Loaded"),
    (rec.init_permission_denied(), nvml.NO_PERMISSION, "Insufficient Permissions"),
])
def test_init_failures_become_a_skip_line(backend, code, words):
    snap = snapshot_of(backend)
    assert not snap.available and snap.error_code == code and snap.gpus == []
    assert snap.status_line.startswith(f"skipped: NVML not available ({words}")
    assert snap.as_dict()["status"] == snap.status_line


def test_no_device_is_available_but_empty():
    snap = snapshot_of(rec.no_device())
    assert snap.available and snap.gpus == []
    assert snap.system["driver_version"] == "550.54.15"
    assert snap.status_line.startswith("skipped: NVML found no GPU")


@pytest.mark.parametrize("record, peak", [
    (rec.H100_SXM, 3.352e12), (rec.A100_SXM4_40GB, 1.555e12), (rec.RTX_4090, 1.008e12), (rec.T4_CONTAINER, 0.320e12),
])
def test_peak_bandwidth_matches_the_published_sku_figure(record, peak):
    gpu = snapshot_of(rec.fake(record)).gpus[0]
    assert gpu.peak_bandwidth == pytest.approx(peak, rel=2e-3)


def test_normal_path_reads_every_field():
    snap = snapshot_of(rec.fake(rec.H100_SXM, rec.A100_SXM4_40GB))
    h100, a100 = snap.gpus
    assert h100.name == "NVIDIA H100 80GB HBM3" and h100.architecture == "hopper"
    assert h100.unsupported == [] and h100.denied == [] and h100.errors == {}
    assert set(h100.values) == set(nvml.DEVICE_FIELDS)
    assert a100.throttle_reasons == ["sw_power_cap", "hw_slowdown"]
    assert a100.as_dict()["ecc_aggregate"] == {"corrected": 17, "uncorrected": 0}
    assert "2 GPU(s)" in snap.status_line


def test_not_supported_fields_are_listed_not_fatal():
    gpu = snapshot_of(rec.fake(rec.RTX_4090)).gpus[0]
    assert sorted(gpu.unsupported) == ["ecc_aggregate", "ecc_volatile", "remapped_rows"]
    assert gpu.peak_bandwidth is not None and gpu.get("ecc_volatile") is None


def test_permission_denied_fields_are_listed_separately():
    gpu = snapshot_of(rec.fake(rec.T4_CONTAINER)).gpus[0]
    assert sorted(gpu.denied) == ["ecc_aggregate", "ecc_volatile", "remapped_rows"]
    assert gpu.unsupported == []


def test_lost_gpu_is_an_error_per_field():
    lost = {k: nvml.NvmlError(nvml.GPU_IS_LOST) for k in nvml.DEVICE_FIELDS}
    gpu = snapshot_of(rec.fake(rec.H100_SXM, lost)).gpus[1]
    assert set(gpu.errors) == set(nvml.DEVICE_FIELDS) and gpu.errors["name"].startswith("GPU is lost")
    assert gpu.name == "GPU 1" and gpu.peak_bandwidth is None


def test_sampler_records_utilisation_and_gpm_on_hopper():
    with NvmlSession(rec.fake(rec.H100_SXM)) as session:
        with UtilSampler(session, 0, interval_s=10.0) as sampler:  # start + end samples only
            pass
    summary = sampler.summary()
    assert summary["samples"] == 2
    assert summary["sm_util_pct"] == {"median": 50.0, "max": 100.0}  # walks the recorded series 0, 100
    assert summary["gpm"]["dram_bw_util"] == 86.4


def test_sampler_without_gpm_says_why():
    with NvmlSession(rec.fake(rec.A100_SXM4_40GB)) as session:
        with UtilSampler(session, 0, interval_s=10.0) as sampler:
            pass
    summary = sampler.summary()
    assert "gpm" not in summary and "Not Supported" in summary["gpm_skipped"]
    assert summary["throttle_reasons_seen"] == ["hw_slowdown", "sw_power_cap"]


def test_cuda_index_maps_through_uuid(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with NvmlSession(rec.fake(rec.A100_SXM4_40GB, rec.H100_SXM)) as session:
        assert session.cuda_to_nvml_index(0, "6d9b2ac4-7e1c-4b39-9c41-3f0b0d1c2e11") == 1
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
        assert session.cuda_to_nvml_index(0, None) == 1


def test_decode_throttle_bits():
    assert decode_throttle(0) == [] and decode_throttle(0x40 | 0x1) == ["gpu_idle", "hw_thermal_slowdown"]


# ---------------------------------------------------------------- the real backend


def test_real_backend_never_raises_here():
    snap = snapshot_of(nvml.PynvmlBackend())
    if snap.available:  # a machine with a driver: the real thing
        assert all(g.name for g in snap.gpus)
    else:
        assert snap.reason and snap.status_line.startswith("skipped: NVML not available (")


def test_real_backend_without_the_python_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    snap = snapshot_of(nvml.PynvmlBackend())
    assert snap.error_code == nvml.PYTHON_MODULE_MISSING and "nvidia-ml-py" in snap.reason


class _StubNVMLError(Exception):
    def __init__(self, value):
        self.value = value
        super().__init__({3: "Not Supported", 4: "Insufficient Permissions"}.get(value, "x"))


def _stub_pynvml():
    """The pynvml calls PynvmlBackend makes, returning what nvidia-ml-py returns (bytes names, structs)."""
    def raise_(code):
        raise _StubNVMLError(code)
    mem = types.SimpleNamespace(total=100, used=40, free=60)
    return types.SimpleNamespace(
        NVMLError=_StubNVMLError, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0, NVML_AGGREGATE_ECC=1,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: ("h", i),
        nvmlSystemGetDriverVersion=lambda: b"550.54.15", nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlSystemGetNVMLVersion=lambda: "12.550",
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlDeviceGetMaxClockInfo=lambda h, t: {1: 1980, 2: 2619}[t],
        nvmlDeviceGetMemoryBusWidth=lambda h: 5120,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4,  # old driver: no ...EventReasons
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: raise_(4),
        nvmlDeviceGetTemperature=lambda h, sensor: raise_(3),
    )


def test_real_backend_translates_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _stub_pynvml())
    fields = ("name", "memory", "max_clock_mem", "bus_width", "throttle_reasons", "ecc_volatile", "temperature_c")
    with NvmlSession(nvml.PynvmlBackend()) as session:
        snap = session.snapshot(fields)
    gpu = snap.gpus[0]
    assert snap.system["driver_version"] == "550.54.15" and gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.values["memory"] == {"total": 100, "used": 40, "free": 60}
    assert gpu.throttle_reasons == ["sw_power_cap"]
    assert gpu.denied == ["ecc_volatile"] and gpu.unsupported == ["temperature_c"]
    assert gpu.peak_bandwidth == pytest.approx(3.352e12, rel=2e-3)
