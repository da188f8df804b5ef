"""What NVML says about the machine's GPUs, as plain data that never raises.

`NvmlSession` wraps one init/shutdown of an `NvmlBackend`; `snapshot()` reads every field of every
device, sorting failures into `unsupported` (NOT_SUPPORTED: the field does not exist on this
device), `denied` (NO_PERMISSION: usually a container without the right capabilities) and `errors`
(anything else, e.g. GPU_IS_LOST). `UtilSampler` polls utilisation, clocks and power in a thread
while a workload runs, which is how `nvidia-smi dmon` sees a GPU "30% busy" while it is saturated.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from probes import nvml


@dataclass
class GpuState:
    index: int
    values: dict[str, Any] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)
    denied: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    @property
    def name(self) -> str:
        return str(self.values.get("name", f"GPU {self.index}"))

    @property
    def peak_bandwidth(self) -> float | None:
        """Theoretical DRAM bandwidth in bytes/s: memory clock x bus width x 2 (DDR) / 8.

        Uses the max memory clock (the SKU figure); H100 SXM: 2619 MHz x 5120 bit -> 3.35 TB/s."""
        clock_mhz = self.values.get("max_clock_mem") or self.values.get("clock_mem")
        bus_bits = self.values.get("bus_width")
        if not clock_mhz or not bus_bits:
            return None
        return clock_mhz * 1e6 * bus_bits * 2 / 8

    @property
    def throttle_reasons(self) -> list[str]:
        return decode_throttle(self.values.get("throttle_reasons", 0))

    @property
    def architecture(self) -> str | None:
        code = self.values.get("architecture")
        return None if code is None else nvml.ARCHITECTURES.get(code, f"arch {code}")

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.values)
        out.update(index=self.index, peak_bandwidth_bytes_s=self.peak_bandwidth,
                   throttle_reason_names=self.throttle_reasons, architecture_name=self.architecture,
                   unsupported=list(self.unsupported), denied=list(self.denied), errors=dict(self.errors))
        return out


@dataclass
class NvmlSnapshot:
    available: bool
    reason: str = ""
    error_code: int | None = None
    system: dict[str, Any] = field(default_factory=dict)
    gpus: list[GpuState] = field(default_factory=list)

    @property
    def status_line(self) -> str:
        if not self.available:
            return f"skipped: NVML not available ({self.reason})"
        if not self.gpus:
            return "skipped: NVML found no GPU (driver loaded, 0 devices visible)"
        names = ", ".join(g.name for g in self.gpus)
        return f"NVML: {len(self.gpus)} GPU(s): {names}; driver {self.system.get('driver_version', '?')}"

    def as_dict(self) -> dict[str, Any]:
        return {"available": self.available, "reason": self.reason, "error_code": self.error_code,
                "system": dict(self.system), "gpus": [g.as_dict() for g in self.gpus],
                "status": self.status_line}


def decode_throttle(mask: int) -> list[str]:
    return [name for bit, name in nvml.THROTTLE_REASONS.items() if mask & bit]


class NvmlSession:
    """One NVML init..shutdown. Never raises out of __enter__: check `.available` / `.reason`."""

    def __init__(self, backend: nvml.NvmlBackend | None = None):
        self.backend = backend if backend is not None else nvml.PynvmlBackend()
        self.available = False
        self.reason = ""
        self.error_code: int | None = None

    def __enter__(self) -> "NvmlSession":
        try:
            self.backend.init()
            self.available = True
        except nvml.NvmlError as exc:
            self.reason, self.error_code = exc.reason, exc.code
        except Exception as exc:  # a broken install (e.g. wrong pynvml package): still data
            self.reason, self.error_code = f"{type(exc).__name__}: {exc}", nvml.UNKNOWN
        return self

    def __exit__(self, *exc_info) -> None:
        if self.available:
            self.backend.shutdown()
            self.available = False

    def snapshot(self, fields: tuple[str, ...] = nvml.DEVICE_FIELDS) -> NvmlSnapshot:
        if not self.available:
            return NvmlSnapshot(False, self.reason or "not initialised", self.error_code)
        snap = NvmlSnapshot(True, system=self._system())
        try:
            count = self.backend.device_count()
        except nvml.NvmlError as exc:
            return NvmlSnapshot(False, f"device count failed: {exc.reason}", exc.code, snap.system)
        snap.gpus = [self.read_device(i, fields) for i in range(count)]
        return snap

    def read_device(self, index: int, fields: tuple[str, ...] = nvml.DEVICE_FIELDS) -> GpuState:
        state = GpuState(index)
        for name in fields:
            try:
                state.values[name] = self.backend.read(index, name)
            except nvml.NvmlError as exc:
                _file_failure(state, name, exc)
        return state

    def cuda_to_nvml_index(self, cuda_index: int, cuda_uuid: str | None) -> int:
        """NVML numbers all GPUs; CUDA only the visible ones (CUDA_VISIBLE_DEVICES): match by UUID."""
        if cuda_uuid:
            for i in range(self.backend.device_count()):
                try:
                    if str(self.backend.read(i, "uuid")).lower().endswith(cuda_uuid.lower()):
                        return i
                except nvml.NvmlError:
                    continue
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if ids and cuda_index < len(ids) and ids[cuda_index].isdigit():
            return int(ids[cuda_index])
        return cuda_index

    def _system(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in nvml.SYSTEM_FIELDS:
            try:
                out[name] = self.backend.system(name)
            except nvml.NvmlError as exc:
                out[name + "_error"] = exc.reason
        return out


def _file_failure(state: GpuState, name: str, exc: nvml.NvmlError) -> None:
    if exc.code in (nvml.NOT_SUPPORTED, nvml.FUNCTION_NOT_FOUND):
        state.unsupported.append(name)
    elif exc.code == nvml.NO_PERMISSION:
        state.denied.append(name)
    else:
        state.errors[name] = exc.reason


SAMPLED_FIELDS = ("utilization", "clock_sm", "clock_mem", "power_mw", "temperature_c", "throttle_reasons")


class UtilSampler:
    """Poll SAMPLED_FIELDS every `interval_s` in a thread while the `with` block runs (at least once
    at the start and once at the end), and optionally GPM DRAM-bandwidth utilisation over the block."""

    def __init__(self, session: NvmlSession, index: int, interval_s: float = 0.05, gpm: bool = True):
        self.session, self.index, self.interval_s = session, index, interval_s
        self.samples: list[dict[str, Any]] = []
        self.gpm: dict[str, float] = {}
        self.gpm_reason = ""
        self._want_gpm = gpm
        self._gpm_before: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "UtilSampler":
        if self._want_gpm:
            self._gpm_before = self._gpm_sample()
        self._take()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._take()
        if self._gpm_before is not None:
            after = self._gpm_sample()
            if after is not None:
                self._gpm_read(after)

    def summary(self) -> dict[str, Any]:
        """Median and max of each numeric sampled quantity, plus the union of throttle reasons."""
        series: dict[str, list[float]] = {}
        reasons: set[str] = set()
        for s in self.samples:
            for key, value in s.items():
                if key == "throttle_reasons":
                    reasons.update(decode_throttle(value))
                elif isinstance(value, (int, float)):
                    series.setdefault(key, []).append(float(value))
        out: dict[str, Any] = {"samples": len(self.samples), "throttle_reasons_seen": sorted(reasons)}
        for key, values in series.items():
            out[key] = {"median": statistics.median(values), "max": max(values)}
        if self.gpm:
            out["gpm"] = dict(self.gpm)
        elif self.gpm_reason:
            out["gpm_skipped"] = self.gpm_reason
        return out

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        sample: dict[str, Any] = {"t": time.perf_counter()}
        for name in SAMPLED_FIELDS:
            try:
                value = self.session.backend.read(self.index, name)
            except nvml.NvmlError:
                continue
            if name == "utilization":
                sample["sm_util_pct"], sample["mem_util_pct"] = value["gpu"], value["memory"]
            else:
                sample[name] = value
        self.samples.append(sample)

    def _gpm_sample(self) -> Any:
        try:
            return self.session.backend.gpm_sample(self.index)
        except nvml.NvmlError as exc:
            self.gpm_reason = f"GPM not available ({exc.reason})"
            return None

    def _gpm_read(self, after: Any) -> None:
        try:
            self.gpm = self.session.backend.gpm_metrics(self._gpm_before, after, tuple(nvml.GPM_METRICS))
        except nvml.NvmlError as exc:
            self.gpm_reason = f"GPM metrics failed ({exc.reason})"
