"""The environment an incident ticket needs: Python, torch and its CUDA build, driver and GPUs (NVML), CPU, RAM,
relevant environment variables and the versions of the ecosystem packages; and the mismatches among them that
explain "no kernel image", "driver too old" or a silently CPU-only run. Secrets are never read: variables named
like tokens or keys are reported as set, not their values.
"""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

from probes.gpu_state import NvmlSession

PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "accelerate", "vllm", "sglang", "tensorrt_llm",
            "flash-attn", "flash_attn", "xformers", "triton", "bitsandbytes", "auto-gptq", "autoawq", "peft",
            "optimum", "deepspeed", "sentencepiece", "tiktoken", "gguf", "llama-cpp-python", "numpy",
            "nvidia-ml-py", "pynvml", "jinja2", "huggingface-hub", "llmdoctor")
ENV_PREFIXES = ("CUDA_", "NCCL_", "PYTORCH_", "TORCH_", "HF_", "TRANSFORMERS_", "VLLM_", "NVIDIA_", "OMP_",
                "MKL_", "TOKENIZERS_", "LLMDOCTOR_", "CUBLAS_", "CUDNN_")
ENV_NAMES = ("LD_LIBRARY_PATH", "PATH_TO_CUDA", "CUDA_HOME", "CONDA_DEFAULT_ENV", "VIRTUAL_ENV")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")

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
    from probes.bandwidth import cpu_name
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
