"""`llmdoctor probe bandwidth`: achieved memory bandwidth, measured, next to what NVML says the GPU is.

Two kernels, the nvbandwidth / DCGM way: a device-to-device copy (reads + writes 2 x N bytes) and a
STREAM-triad-like a = b + s * c (3 x N bytes), each warmed up, then timed run by run (CUDA events on a GPU,
perf_counter on the CPU) and summarised by the median. On a GPU the result is a % of the theoretical peak
NVML gives (memory clock x bus width x 2 / 8), with utilisation, clocks, power and GPM DRAM-bandwidth
utilisation sampled while the kernels run. Without an NVIDIA driver the NVML part is a clear
"skipped: NVML not available (<reason>)" and the same kernels measure host memory instead.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from findings import Finding
from probes.gpu_state import GpuState, NvmlSession, NvmlSnapshot, UtilSampler

DCGM_PASS_FRACTION = 0.75   # dcgmi diag -r 3 memory_bandwidth passes at >= 75% of the SKU figure


@dataclass
class Measurement:
    kind: str                 # "copy" or "triad"
    bytes_per_run: int        # bytes read + written by one run
    times_s: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_per_run / self.median_s

    def as_dict(self) -> dict:
        return {"kind": self.kind, "bytes_per_run": self.bytes_per_run, "runs": len(self.times_s),
                "median_s": self.median_s, "gb_s": round(self.bytes_per_s / 1e9, 3),
                "min_s": min(self.times_s), "max_s": max(self.times_s)}


@dataclass
class BandwidthResult:
    device: str                              # "cpu" or "cuda:N"
    device_name: str
    nvml: NvmlSnapshot
    measurements: list[Measurement] = field(default_factory=list)
    gpu: GpuState | None = None              # the NVML state of the measured GPU
    sampled: dict = field(default_factory=dict)

    @property
    def best_bytes_per_s(self) -> float:
        return max(m.bytes_per_s for m in self.measurements)

    @property
    def peak_bytes_per_s(self) -> float | None:
        return self.gpu.peak_bandwidth if self.gpu else None


def timer(device: torch.device):
    """A function timing one call of fn on `device`: CUDA events on a GPU, perf_counter elsewhere."""
    if device.type == "cuda":
        def time_cuda(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return time_cuda

    def time_host(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return time_host


def measure_kernels(device: torch.device, size_bytes: int, runs: int = 5, warmup: int = 2,
                    dtype: torch.dtype = torch.float32) -> list[Measurement]:
    n = max(1, size_bytes // torch.empty((), dtype=dtype).element_size())
    a = torch.empty(n, dtype=dtype, device=device)
    b = torch.rand(n, dtype=dtype, device=device)
    c = torch.rand(n, dtype=dtype, device=device)
    nbytes = n * a.element_size()
    kernels = {"copy": (lambda: a.copy_(b), 2 * nbytes),
               "triad": (lambda: torch.add(b, c, alpha=3.0, out=a), 3 * nbytes)}
    clock = timer(device)
    out = []
    for kind, (fn, moved) in kernels.items():
        for _ in range(warmup):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        out.append(Measurement(kind, moved, [clock(fn) for _ in range(runs)]))
    _verify(a, b, c)
    return out


SUSTAIN_S = 1.5


def sustain_triad(device: torch.device, size_bytes: int, seconds: float) -> int:
    """Keep the memory busy for `seconds` so NVML utilisation and GPM samples see the load; returns runs."""
    n = max(1, size_bytes // 4)
    a, b, c = (torch.ones(n, device=device) for _ in range(3))
    runs, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(10):
            torch.add(b, c, alpha=3.0, out=a)
        torch.cuda.synchronize(device)
        runs += 10
    return runs


def _verify(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """The last kernel was the triad: check a sample, so a broken device cannot report a fast no-op."""
    idx = torch.arange(0, a.numel(), max(1, a.numel() // 64), device=a.device)
    expected = b[idx] + 3.0 * c[idx]
    if not torch.allclose(a[idx], expected, rtol=1e-5, atol=1e-6):
        raise RuntimeError("triad result is wrong: the device computed garbage")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "cpu"


def run_bandwidth_probe(device: str = "auto", size_bytes: int | None = None, runs: int = 5,
                        nvml_backend=None) -> BandwidthResult:
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    with NvmlSession(nvml_backend) as session:
        snapshot = session.snapshot()
        if dev.type != "cuda":
            sizes = size_bytes or 128 * 2**20   # > any last-level cache
            return BandwidthResult("cpu", cpu_name(), snapshot, measure_kernels(dev, sizes, runs))
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        nvml_index = session.cuda_to_nvml_index(index, str(getattr(props, "uuid", "") or "")) \
            if session.available else index
        gpu = next((g for g in snapshot.gpus if g.index == nvml_index), None)
        result = BandwidthResult(f"cuda:{index}", props.name, snapshot, gpu=gpu)
        size = size_bytes or 1 << 30
        if session.available and gpu is not None:
            with UtilSampler(session, nvml_index) as sampler:
                result.measurements = measure_kernels(torch.device("cuda", index), size, runs)
                sustain_triad(torch.device("cuda", index), size, SUSTAIN_S)  # NVML averages over ~1 s windows
            result.sampled = sampler.summary()
        else:
            result.measurements = measure_kernels(torch.device("cuda", index), size, runs)
        return result


# ---------------------------------------------------------------- findings


def bandwidth_findings(result: BandwidthResult) -> list[Finding]:
    return [nvml_finding(result), achieved_finding(result)]


def nvml_finding(result: BandwidthResult) -> Finding:
    snap = result.nvml
    if not snap.available or not snap.gpus:
        return Finding("GPU101", "gpu", "info", snap.status_line, evidence=snap.as_dict(),
                       hint="NVML needs the NVIDIA driver; on a CPU-only machine this is expected")
    problems = []
    for g in snap.gpus:
        problems += gpu_problems(g)
    severity = "warning" if problems else "info"
    message = snap.status_line + (f"; {len(problems)} problem(s): {problems[0]}" if problems else "")
    return Finding("GPU101", "gpu", severity, message, evidence={**snap.as_dict(), "problems": problems},
                   hint="see problems in evidence: throttling, ECC/row-remap and PCIe link state" if problems else "")


def gpu_problems(g: GpuState) -> list[str]:
    """Device states that make a GPU slow or unreliable, from its NVML fields."""
    out = []
    bad_throttle = [r for r in g.throttle_reasons if r not in ("gpu_idle", "applications_clocks_setting")]
    if bad_throttle:
        out.append(f"GPU {g.index}: clocks throttled by {', '.join(bad_throttle)}")
    ecc = g.get("ecc_volatile") or {}
    if ecc.get("uncorrected"):
        out.append(f"GPU {g.index}: {ecc['uncorrected']} uncorrected ECC errors since boot")
    rows = g.get("remapped_rows") or {}
    if rows.get("pending") or rows.get("failure"):
        out.append(f"GPU {g.index}: row remapping {'failed' if rows.get('failure') else 'pending (reset needed)'}")
    gen, max_gen = g.get("pcie_gen"), g.get("pcie_max_gen")
    width, max_width = g.get("pcie_width"), g.get("pcie_max_width")
    idle = "gpu_idle" in g.throttle_reasons   # links train down when idle: only flag a loaded GPU
    if not idle and gen and max_gen and (gen < max_gen or (width and max_width and width < max_width)):
        out.append(f"GPU {g.index}: PCIe link gen{gen} x{width} below its max gen{max_gen} x{max_width}")
    if g.errors:
        out.append(f"GPU {g.index}: NVML errors {g.errors}")
    return out


def achieved_finding(result: BandwidthResult) -> Finding:
    rows = [m.as_dict() for m in result.measurements]
    best = result.best_bytes_per_s
    peak = result.peak_bytes_per_s
    plot = {"kind": "bar", "title": f"achieved bandwidth, {result.device_name}",
            "x": [m.kind for m in result.measurements],
            "series": {"GB/s": [round(m.bytes_per_s / 1e9, 2) for m in result.measurements]},
            "x_label": "kernel", "y_label": "GB/s"}
    evidence = {"device": result.device, "device_name": result.device_name, "measurements": rows,
                "best_gb_s": round(best / 1e9, 3)}
    if peak is None:
        where = "host memory" if result.device == "cpu" else "GPU memory (no NVML peak)"
        return Finding("GPU102", "gpu", "info",
                       f"{where} bandwidth on {result.device_name}: copy {rows[0]['gb_s']:.1f} GB/s, "
                       f"triad {rows[1]['gb_s']:.1f} GB/s (median of {rows[0]['runs']} runs)",
                       evidence=evidence, data={"plot": plot})
    fraction = best / peak
    plot["hlines"] = {"NVML peak": round(peak / 1e9, 1), "75% (DCGM pass)": round(DCGM_PASS_FRACTION * peak / 1e9, 1)}
    evidence.update(peak_gb_s=round(peak / 1e9, 1), fraction_of_peak=round(fraction, 4), sampled=result.sampled)
    low = fraction < DCGM_PASS_FRACTION
    return Finding("GPU102", "gpu", "warning" if low else "info",
                   f"{result.device_name}: best {best / 1e9:.0f} GB/s = {fraction:.0%} of the {peak / 1e9:.0f} GB/s "
                   f"NVML peak (copy {rows[0]['gb_s']:.0f}, triad {rows[1]['gb_s']:.0f} GB/s)",
                   evidence=evidence,
                   hint="below DCGM's 75% pass mark: check throttle reasons, other processes and clocks"
                   if low else "", data={"plot": plot})
