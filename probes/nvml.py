"""Thin injectable boundary over NVML (the `pynvml` module of nvidia-ml-py).

Everything llmdoctor reads from NVML goes through `NvmlBackend`: a handful of methods that name a
field instead of a C call. `PynvmlBackend` is the real thing; `FakeNvml` is fed values recorded from
real devices (and their documented failure codes) so the probes are unit-tested on machines with no
GPU, which is every CI machine. `read_snapshot()` turns a backend into plain data and never raises:
no library, no driver, no device, permission denied and NOT_SUPPORTED fields all become data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

# NVML return codes (nvml.h; same values as pynvml.NVML_ERROR_*). Kept here so the fake needs no pynvml.
UNINITIALIZED = 1
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999
PYTHON_MODULE_MISSING = -1  # ours: `import pynvml` itself failed

_CODE_TEXT = {
    UNINITIALIZED: "Uninitialized",
    NOT_SUPPORTED: "Not Supported",
    NO_PERMISSION: "Insufficient Permissions",
    NOT_FOUND: "Not Found",
    DRIVER_NOT_LOADED: "Driver Not Loaded",
    LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    FUNCTION_NOT_FOUND: "Function Not Found (driver older than this call)",
    GPU_IS_LOST: "GPU is lost",
    LIB_RM_VERSION_MISMATCH: "NVML/driver version mismatch (reboot after a driver upgrade?)",
    UNKNOWN: "Unknown Error",
    PYTHON_MODULE_MISSING: "Python package nvidia-ml-py (module pynvml) is not installed",
}

# Why a code usually happens, appended to the reason an SRE reads.
_CODE_HINT = {
    LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 not loadable: no NVIDIA driver on this machine",
    DRIVER_NOT_LOADED: "the kernel module is not loaded",
    NO_PERMISSION: "no access to /dev/nvidia*: run with the GPU exposed to this user/container",
}

# Fields a backend can read for one device (values: see PynvmlBackend._readers).
DEVICE_FIELDS = (
    "name", "uuid", "architecture", "compute_capability", "memory", "clock_sm", "clock_mem",
    "max_clock_sm", "max_clock_mem", "bus_width", "utilization", "throttle_reasons", "ecc_volatile",
    "ecc_aggregate", "remapped_rows", "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width",
    "temperature_c", "power_mw", "power_limit_mw", "persistence_mode", "gpm_supported",
)
SYSTEM_FIELDS = ("driver_version", "cuda_driver_version", "nvml_version")
# Bits of nvmlClocksEventReasons (formerly ClocksThrottleReasons), nvml.h.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
ARCHITECTURES = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere",
                 8: "ada", 9: "hopper", 10: "blackwell"}
GPM_METRICS = {"dram_bw_util": 10, "sm_util": 2, "sm_occupancy": 3}  # NVML_GPM_METRIC_* ids


class NvmlError(Exception):
    """An NVML call failed with `code` (an NVML_ERROR_* value, or PYTHON_MODULE_MISSING)."""

    def __init__(self, code: int, detail: str = ""):
        self.code = code
        self.detail = detail
        super().__init__(detail or _CODE_TEXT.get(code, f"NVML error {code}"))

    @property
    def reason(self) -> str:
        name = _CODE_TEXT.get(self.code, f"NVML error {self.code}")
        text = f"{name}: {self.detail}" if self.detail and self.detail != name else name
        hint = _CODE_HINT.get(self.code)
        return f"{text}; {hint}" if hint else text


class NvmlBackend(Protocol):
    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def system(self, name: str) -> Any: ...
    def device_count(self) -> int: ...
    def read(self, index: int, name: str) -> Any: ...
    def gpm_sample(self, index: int) -> Any: ...
    def gpm_metrics(self, before: Any, after: Any, names: tuple[str, ...]) -> dict[str, float]: ...


# ---------------------------------------------------------------- real backend


class PynvmlBackend:
    """NvmlBackend over nvidia-ml-py. Every pynvml exception is re-raised as NvmlError(code)."""

    def __init__(self):
        self._nv = None
        self._handles: dict[int, Any] = {}

    def init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlError(PYTHON_MODULE_MISSING, str(exc)) from None
        self._nv = pynvml
        self._call(pynvml.nvmlInit)

    def shutdown(self) -> None:
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:  # shutdown after a failed init: nothing to release
                pass
            self._nv, self._handles = None, {}

    def system(self, name: str) -> Any:
        nv = self._nv
        readers = {"driver_version": nv.nvmlSystemGetDriverVersion,
                   "cuda_driver_version": nv.nvmlSystemGetCudaDriverVersion,
                   "nvml_version": nv.nvmlSystemGetNVMLVersion}
        return _text(self._call(readers[name]))

    def device_count(self) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCount))

    def read(self, index: int, name: str) -> Any:
        return self._call(lambda: self._readers()[name](self._handle(index)))

    def gpm_sample(self, index: int) -> Any:
        nv = self._nv
        sample = self._call(nv.nvmlGpmSampleAlloc)
        self._call(lambda: nv.nvmlGpmSampleGet(self._handle(index), sample))
        return sample

    def gpm_metrics(self, before: Any, after: Any, names: tuple[str, ...]) -> dict[str, float]:
        nv = self._nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(names)
        request.sample1, request.sample2 = before, after
        for i, metric in enumerate(names):
            request.metrics[i].metricId = GPM_METRICS[metric]
        try:
            self._call(lambda: nv.nvmlGpmMetricsGet(request))
            return {m: float(request.metrics[i].value) for i, m in enumerate(names)
                    if request.metrics[i].nvmlReturn == 0}
        finally:
            for sample in (before, after):
                try:
                    nv.nvmlGpmSampleFree(sample)
                except Exception:
                    pass

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nv.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self._nv.NVMLError as exc:
            raise NvmlError(int(getattr(exc, "value", UNKNOWN)), str(exc)) from None
        except AttributeError as exc:  # an older nvidia-ml-py without this call
            raise NvmlError(FUNCTION_NOT_FOUND, str(exc)) from None

    def _readers(self) -> dict[str, Callable[[Any], Any]]:
        nv = self._nv

        def memory(h):
            m = nv.nvmlDeviceGetMemoryInfo(h)
            return {"total": int(m.total), "used": int(m.used), "free": int(m.free)}

        def util(h):
            u = nv.nvmlDeviceGetUtilizationRates(h)
            return {"gpu": int(u.gpu), "memory": int(u.memory)}

        def ecc(counter):
            return lambda h: {
                "corrected": int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter)),
                "uncorrected": int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter))}

        def remapped(h):
            corr, unc, pending, failure = nv.nvmlDeviceGetRemappedRows(h)
            return {"correctable": corr, "uncorrectable": unc, "pending": bool(pending), "failure": bool(failure)}

        def throttle(h):
            fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            return int((fn or nv.nvmlDeviceGetCurrentClocksThrottleReasons)(h))

        return {
            "name": lambda h: _text(nv.nvmlDeviceGetName(h)),
            "uuid": lambda h: _text(nv.nvmlDeviceGetUUID(h)),
            "architecture": lambda h: int(nv.nvmlDeviceGetArchitecture(h)),
            "compute_capability": lambda h: "%d.%d" % nv.nvmlDeviceGetCudaComputeCapability(h),
            "memory": memory,
            "clock_sm": lambda h: int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "clock_mem": lambda h: int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            "max_clock_sm": lambda h: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            "max_clock_mem": lambda h: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            "bus_width": lambda h: int(nv.nvmlDeviceGetMemoryBusWidth(h)),
            "utilization": util,
            "throttle_reasons": throttle,
            "ecc_volatile": ecc(nv.NVML_VOLATILE_ECC),
            "ecc_aggregate": ecc(nv.NVML_AGGREGATE_ECC),
            "remapped_rows": remapped,
            "pcie_gen": lambda h: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "pcie_width": lambda h: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
            "pcie_max_gen": lambda h: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            "pcie_max_width": lambda h: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
            "temperature_c": lambda h: int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "power_mw": lambda h: int(nv.nvmlDeviceGetPowerUsage(h)),
            "power_limit_mw": lambda h: int(nv.nvmlDeviceGetEnforcedPowerLimit(h)),
            "persistence_mode": lambda h: bool(nv.nvmlDeviceGetPersistenceMode(h)),
            "gpm_supported": lambda h: bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice),
        }


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# ---------------------------------------------------------------- fake backend


@dataclass
class FakeNvml:
    """NvmlBackend fed recorded values. A value that is an NvmlError is raised when read; a field
    absent from a device's dict raises NOT_SUPPORTED, as NVML does on devices that lack it.
    `utilization` may be a list: successive reads walk through it (then repeat the last one)."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    system_values: dict[str, Any] = field(default_factory=dict)
    init_error: NvmlError | None = None
    initialised: bool = False
    reads: list[tuple[int, str]] = field(default_factory=list)

    def init(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialised = True

    def shutdown(self) -> None:
        self.initialised = False

    def system(self, name: str) -> Any:
        return self._value(self.system_values, name, name)

    def device_count(self) -> int:
        self._require_init()
        return len(self.devices)

    def read(self, index: int, name: str) -> Any:
        self._require_init()
        if not 0 <= index < len(self.devices):
            raise NvmlError(NOT_FOUND, f"no device {index}")
        self.reads.append((index, name))
        value = self._value(self.devices[index], name, name)
        if isinstance(value, list):
            seen = sum(1 for i, n in self.reads if (i, n) == (index, name))
            return value[min(seen - 1, len(value) - 1)]
        return value

    def gpm_sample(self, index: int) -> Any:
        if not self.read(index, "gpm_supported"):
            raise NvmlError(NOT_SUPPORTED, "GPM needs Hopper or newer")
        return ("gpm", index)

    def gpm_metrics(self, before: Any, after: Any, names: tuple[str, ...]) -> dict[str, float]:
        recorded = self._value(self.devices[before[1]], "gpm_metrics", "gpm_metrics")
        return {n: float(recorded[n]) for n in names if n in recorded}

    def _require_init(self) -> None:
        if not self.initialised:
            raise NvmlError(UNINITIALIZED, "Uninitialized")

    def _value(self, values: dict[str, Any], key: str, label: str) -> Any:
        if key not in values:
            raise NvmlError(NOT_SUPPORTED, label)
        value = values[key]
        if isinstance(value, NvmlError):
            raise value
        return value
