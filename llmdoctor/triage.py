"""`llmdoctor triage [MODEL_DIR] -o bundle/`: everything an incident ticket needs, in one directory.

Like `vllm collect-env` / `nvidia-bug-report`: Python, torch, CUDA, driver, GPUs and their NVML state, CPU,
RAM, relevant environment variables and the versions of the ecosystem packages; then the quick checks on
the model and the probes (bandwidth + decode roofline, KV-cache fragmentation sized for the model). Writes
report.json, report.md, report.html and environment.json into the bundle. Never writes into the model
directory (the bundle may not be inside it), never reads secrets (variables named like tokens/keys are
reported as set or unset only).
"""
from __future__ import annotations

import io
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from llmdoctor.finding import Finding, Report
from llmdoctor.gpu_state import NvmlSession
from llmdoctor.probes.report import ProbeRecorder
from reference_engine.errors import ModelDirError

PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "accelerate", "vllm", "sglang", "tensorrt_llm",
            "flash-attn", "flash_attn", "xformers", "triton", "bitsandbytes", "auto-gptq", "autoawq", "peft",
            "optimum", "deepspeed", "sentencepiece", "tiktoken", "gguf", "llama-cpp-python", "numpy",
            "nvidia-ml-py", "pynvml", "jinja2", "huggingface-hub", "llmdoctor")
ENV_PREFIXES = ("CUDA_", "NCCL_", "PYTORCH_", "TORCH_", "HF_", "TRANSFORMERS_", "VLLM_", "NVIDIA_", "OMP_",
                "MKL_", "TOKENIZERS_", "LLMDOCTOR_", "CUBLAS_", "CUDNN_")
ENV_NAMES = ("LD_LIBRARY_PATH", "PATH_TO_CUDA", "CUDA_HOME", "CONDA_DEFAULT_ENV", "VIRTUAL_ENV")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
BUNDLE_FILES = ("report.json", "report.md", "report.html", "environment.json")


@dataclass
class TriageResult:
    bundle: Path
    report: Report
    files: list[Path] = field(default_factory=list)


def collect_environment(nvml_backend=None) -> dict:
    import torch
    with NvmlSession(nvml_backend) as session:
        nvml = session.snapshot().as_dict()
    return {"python": {"version": sys.version.split()[0], "implementation": platform.python_implementation(),
                       "executable": sys.executable},
            "platform": {"system": platform.platform(), "machine": platform.machine()},
            "torch": torch_info(torch), "nvml": nvml, "cpu": _cpu_info(), "memory": _meminfo(),
            "env": relevant_env(os.environ), "packages": package_versions()}


def torch_info(torch) -> dict:
    info = {"version": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "threads": torch.get_num_threads(), "devices": []}
    if torch.cuda.is_available():
        info["arch_list"] = torch.cuda.get_arch_list()
        info["cudnn"] = torch.backends.cudnn.version()
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["devices"].append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                                    "memory_bytes": p.total_memory})
    return info


def _cpu_info() -> dict:
    from llmdoctor.probes.bandwidth import cpu_name
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"name": cpu_name(), "logical_cores": os.cpu_count(), "usable_cores": affinity}


def _meminfo() -> dict:
    out = {}
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("MemTotal", "MemAvailable", "SwapTotal"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def relevant_env(environ) -> dict:
    out = {}
    for name in sorted(environ):
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES:
            secret = any(word in name.upper() for word in SECRET_WORDS)
            out[name] = "<set>" if secret else environ[name]
    return out


def package_versions() -> dict:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    for dist in metadata.distributions():  # CUDA libraries shipped as wheels (nvidia-cublas-cu12, ...)
        name = dist.metadata.get("Name") or ""
        if name.lower().startswith("nvidia-") and name not in found:
            found[name] = dist.version
    return found


def environment_problems(env: dict) -> list[str]:
    """Mismatches that explain 'no kernel image', 'driver too old' or a silently CPU-only run."""
    out, t, nvml = [], env["torch"], env["nvml"]
    if nvml.get("gpus") and not t["cuda_available"]:
        why = "a CPU-only torch build" if not t["cuda_build"] else "CUDA not usable by torch"
        out.append(f"NVML sees {len(nvml['gpus'])} GPU(s) but torch cannot use them ({why})")
    driver = nvml.get("system", {}).get("cuda_driver_version")
    if isinstance(driver, int) and t["cuda_build"]:
        major, minor = (int(x) for x in t["cuda_build"].split(".")[:2])
        if driver < major * 1000 + minor * 10:
            out.append(f"driver supports CUDA {driver // 1000}.{driver % 1000 // 10} but torch was built for "
                       f"CUDA {t['cuda_build']}")
    arches = t.get("arch_list") or []
    for d in t["devices"]:
        sm = "sm_" + d["capability"].replace(".", "")
        if arches and sm not in arches and not any(a.startswith("compute_") for a in arches):
            out.append(f"{d['name']} is {sm}, not in this torch build's arch list {arches}")
    return out


def environment_finding(env: dict) -> Finding:
    problems = environment_problems(env)
    t = env["torch"]
    gpus = env["nvml"].get("status", "")
    message = (f"Python {env['python']['version']}, torch {t['version']} (CUDA build {t['cuda_build'] or 'none'}), "
               f"{env['cpu']['logical_cores']} CPU cores, {env['memory'].get('MemTotal', 0) / 2**30:.1f} GiB RAM; {gpus}")
    if problems:
        message += f"; {problems[0]}"
    return Finding("ENV101", "environment", "warning" if problems else "info", message,
                   evidence={**env, "problems": problems},
                   hint="install the torch build matching this driver and GPU (see problems)" if problems else "")


def check_bundle_location(model_dir: Path | None, bundle: Path) -> None:
    if model_dir is None:
        return
    model, out = model_dir.resolve(), bundle.resolve()
    if out == model or model in out.parents:
        raise ModelDirError(bundle, "the triage bundle may not be written inside the model directory")


def run_triage(model_dir: str | Path | None, bundle: str | Path, *, device: str = "auto", kv_requests: int = 5000,
               bandwidth_bytes: int | None = None, run_checks: bool = True, nvml_backend=None) -> TriageResult:
    from llmdoctor.triage_probes import run_checks_part, run_probes_part
    root = Path(model_dir) if model_dir is not None else None
    bundle = Path(bundle)
    check_bundle_location(root, bundle)
    bundle.mkdir(parents=True, exist_ok=True)
    recorder = ProbeRecorder(str(model_dir) if model_dir is not None else "(no model)")
    started = time.perf_counter()
    env = collect_environment(nvml_backend)
    recorder.add([environment_finding(env)], time.perf_counter() - started)
    fingerprint = run_checks_part(recorder, root, device) if (root is not None and run_checks) else None
    run_probes_part(recorder, root, device, kv_requests, bandwidth_bytes, nvml_backend)
    report = recorder.report(fail_on="error", fingerprint=fingerprint)
    files = write_bundle(report, env, bundle)
    return TriageResult(bundle, report, files)


def write_bundle(report: Report, env: dict, bundle: Path) -> list[Path]:
    from reports import render
    outputs = {"report.json": "json", "report.md": "markdown", "report.html": "html"}
    files = []
    for name, fmt in outputs.items():
        buffer = io.StringIO()
        render(report, fmt, buffer)
        (bundle / name).write_text(buffer.getvalue(), encoding="utf-8")
        files.append(bundle / name)
    (bundle / "environment.json").write_text(json.dumps(env, indent=2, sort_keys=True, default=str), encoding="utf-8")
    files.append(bundle / "environment.json")
    return files


def crash_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
