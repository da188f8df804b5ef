"""NVML values of real devices, for FakeNvml.

Figures are the ones `nvidia-smi -q` reports for these SKUs (memory clock and bus width give the
published peak bandwidth: H100 SXM 3.35 TB/s, A100 SXM4 1.555 TB/s, RTX 4090 1.008 TB/s, T4 320 GB/s),
and the failure codes are the ones nvml.h documents for each situation.
"""
from __future__ import annotations

import copy

from probes import nvml
from probes.nvml import FakeNvml, NvmlError

SYSTEM = {"driver_version": "550.54.15", "cuda_driver_version": 12040, "nvml_version": "12.550.54.15"}

H100_SXM = {
    "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-6d9b2ac4-7e1c-4b39-9c41-3f0b0d1c2e11",
    "architecture": 9, "compute_capability": "9.0",
    "memory": {"total": 85520809984, "used": 5242880000, "free": 80277929984},
    "clock_sm": 1980, "clock_mem": 2619, "max_clock_sm": 1980, "max_clock_mem": 2619, "bus_width": 5120,
    "utilization": [{"gpu": 0, "memory": 0}, {"gpu": 100, "memory": 83}, {"gpu": 100, "memory": 86}],
    "throttle_reasons": 0x0, "ecc_volatile": {"corrected": 0, "uncorrected": 0},
    "ecc_aggregate": {"corrected": 0, "uncorrected": 0},
    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5, "pcie_max_width": 16,
    "temperature_c": 38, "power_mw": 121000, "power_limit_mw": 700000, "persistence_mode": True,
    "gpm_supported": True, "gpm_metrics": {"dram_bw_util": 86.4, "sm_util": 97.0, "sm_occupancy": 41.2},
}

A100_SXM4_40GB = {
    "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-1f3c5e7a-0b2d-4c6e-8a9b-1c2d3e4f5a6b",
    "architecture": 7, "compute_capability": "8.0",
    "memory": {"total": 42949672960, "used": 4194304, "free": 42945478656},
    "clock_sm": 1410, "clock_mem": 1215, "max_clock_sm": 1410, "max_clock_mem": 1215, "bus_width": 5120,
    "utilization": {"gpu": 30, "memory": 92},
    # sw power cap + hw slowdown: the "busy but slow" incident
    "throttle_reasons": 0x4 | 0x8, "ecc_volatile": {"corrected": 3, "uncorrected": 0},
    "ecc_aggregate": {"corrected": 17, "uncorrected": 0},
    "remapped_rows": {"correctable": 1, "uncorrectable": 0, "pending": False, "failure": False},
    "pcie_gen": 3, "pcie_width": 16, "pcie_max_gen": 4, "pcie_max_width": 16,
    "temperature_c": 84, "power_mw": 398000, "power_limit_mw": 400000, "persistence_mode": True,
    "gpm_supported": False,
}

# GeForce: no ECC and no row remapper -> NOT_SUPPORTED for those fields, as on real consumer boards.
RTX_4090 = {
    "name": "NVIDIA GeForce RTX 4090", "uuid": "GPU-a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d",
    "architecture": 8, "compute_capability": "8.9",
    "memory": {"total": 25757220864, "used": 1073741824, "free": 24683479040},
    "clock_sm": 2520, "clock_mem": 10501, "max_clock_sm": 3120, "max_clock_mem": 10501, "bus_width": 384,
    "utilization": {"gpu": 12, "memory": 4}, "throttle_reasons": 0x1,
    "pcie_gen": 4, "pcie_width": 16, "pcie_max_gen": 4, "pcie_max_width": 16,
    "temperature_c": 45, "power_mw": 35000, "power_limit_mw": 450000, "persistence_mode": False,
    "gpm_supported": False,
}

# Tesla T4 in an unprivileged container: NO_PERMISSION on the fields that need elevated access.
T4_CONTAINER = {
    "name": "Tesla T4", "uuid": "GPU-0a1b2c3d-4e5f-4a6b-9c8d-7e6f5a4b3c2d",
    "architecture": 6, "compute_capability": "7.5",
    "memory": {"total": 16106127360, "used": 0, "free": 16106127360},
    "clock_sm": 585, "clock_mem": 5000, "max_clock_sm": 1590, "max_clock_mem": 5001, "bus_width": 256,
    "utilization": {"gpu": 0, "memory": 0}, "throttle_reasons": 0x1,
    "ecc_volatile": NvmlError(nvml.NO_PERMISSION), "ecc_aggregate": NvmlError(nvml.NO_PERMISSION),
    "remapped_rows": NvmlError(nvml.NO_PERMISSION),
    "pcie_gen": 1, "pcie_width": 16, "pcie_max_gen": 3, "pcie_max_width": 16,
    "temperature_c": 31, "power_mw": 9000, "power_limit_mw": 70000, "persistence_mode": False,
    "gpm_supported": False,
}


def fake(*devices: dict, **kw) -> FakeNvml:
    return FakeNvml(devices=[copy.deepcopy(d) for d in devices], system_values=dict(SYSTEM), **kw)


def no_library() -> FakeNvml:
    """Machine without the NVIDIA driver: libnvidia-ml.so.1 cannot be dlopen'ed."""
    return FakeNvml(init_error=NvmlError(nvml.LIBRARY_NOT_FOUND))


def driver_not_loaded() -> FakeNvml:
    return FakeNvml(init_error=NvmlError(nvml.DRIVER_NOT_LOADED))


def init_permission_denied() -> FakeNvml:
    """nvml.h: nvmlInit returns NO_PERMISSION when NVML may not talk to the driver (/dev/nvidia*)."""
    return FakeNvml(init_error=NvmlError(nvml.NO_PERMISSION))


def no_device() -> FakeNvml:
    """Driver loaded, zero devices visible (a container started without --gpus)."""
    return FakeNvml(devices=[], system_values=dict(SYSTEM))
