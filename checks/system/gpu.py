"""GPU checks (GPU): the state of the GPU the engine runs on, its achieved bandwidth and the decode roofline.

They need a CUDA device and are skipped without one. The same measurements, with the CPU fallback and
the NVML "skipped: ..." line, are what `llmdoctor probe bandwidth` reports (llmdoctor/probes/bandwidth.py).
"""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check


def nvml_state_of(device, backend=None):
    """(GpuState or None, reason) of the CUDA device `device` through NVML."""
    import torch

    from probes.gpu_state import NvmlSession
    with NvmlSession(backend) as session:
        if not session.available:
            return None, f"NVML not available ({session.reason})"
        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
        return session.read_device(session.cuda_to_nvml_index(index, uuid)), ""


@check("GPU101", category="gpu", severity="warning", needs=("gpu",),
       hint="Fix the device before tuning the model: cooling/power for throttling, a GPU reset or RMA for "
            "ECC/row-remap failures, reseat or re-slot for a degraded PCIe link.")
def gpu_device_state(ctx):
    """The GPU is not throttled, has no uncorrected ECC errors or pending row remaps, and its PCIe link is at full
    speed.

    Reads NVML (nvidia-ml-py) for the device the engine runs on: clock throttle reasons (power cap,
    thermal or hardware slowdown), volatile ECC counters, row-remapper state, and PCIe generation/width
    against their maxima. These are the "GPU shows 30% utilisation but it is slow" and "it crashed with
    Xid 79/ECC" incidents: the model is fine, the device is not. The same tests run in DCGM's level-1
    diagnostics (`dcgmi diag -r 1`). Skipped on machines without a CUDA device; on a GPU whose driver
    does not expose NVML, skipped with the NVML reason.
    """
    from probes.bandwidth import gpu_problems
    state, reason = nvml_state_of(ctx.gpu)
    if state is None:
        raise Skip(reason)
    for problem in gpu_problems(state):
        yield Problem(problem, evidence=state.as_dict())


@check("GPU102", category="gpu", severity="warning", needs=("gpu",),
       hint="Below DCGM's 75% pass mark: look for throttle reasons, other processes on the GPU and clocks "
            "(nvidia-smi -q -d CLOCK,PERFORMANCE).")
def gpu_memory_bandwidth(ctx):
    """Achieved device memory bandwidth (copy and STREAM triad, CUDA events, median) is at least 75% of the NVML peak.

    The theoretical peak is memory clock x bus width x 2 / 8 from NVML (H100 SXM: 3.35 TB/s). A triad
    kernel reaching less than 75% of it fails DCGM's memory-bandwidth diagnostic (`dcgmi diag -r 3`);
    batch-1 decode is bandwidth bound, so tokens/s falls with it. Reported as info when healthy, with the
    measured figures as evidence and a bar chart in the HTML report.
    """
    from probes.bandwidth import achieved_finding, run_bandwidth_probe
    result = run_bandwidth_probe(str(ctx.gpu), 256 * 2**20 if ctx.quick else None, 3 if ctx.quick else 5)
    finding = achieved_finding(result)
    ctx.state["measured_bandwidth"] = result.best_bytes_per_s
    yield Problem(finding.message, evidence=finding.evidence, severity=finding.severity, data=finding.data,
                  hint=finding.hint or None)


@check("GPU103", category="gpu", severity="info", needs=("engine", "gpu"),
       hint="Memory bound is the healthy state at batch 1; overhead bound means fusing kernels, CUDA graphs or "
            "batching would pay off.")
def decode_roofline(ctx):
    """Batch-1 decode on this GPU: achieved bytes/s vs measured bandwidth -> memory, compute or overhead bound.

    Times the engine's greedy decode steps with CUDA events, divides the weight (and KV) bytes each step
    reads by the step time, and compares with the bandwidth measured on the same device (GPU102) and a
    matmul's FLOP/s. gpt-fast reaches ~80% of an A100's bandwidth at batch 1; far less means kernel
    launch and Python overhead dominate, which no amount of memory bandwidth fixes.
    """
    from probes.bandwidth import measure_kernels
    from probes.decode_roofline import measure_decode, roofline_finding
    measured = ctx.state.get("measured_bandwidth")
    if measured is None:
        measured = max(m.bytes_per_s for m in measure_kernels(ctx.gpu, 256 * 2**20, 3))
    if ctx.engine.device.type != "cuda":
        raise Skip(f"the engine runs on {ctx.engine.device}, not the GPU")
    finding = roofline_finding(measure_decode(ctx.engine, measured, str(ctx.model_dir), steps=8 if ctx.quick else 16))
    yield Problem(finding.message, evidence=finding.evidence, data=finding.data)
