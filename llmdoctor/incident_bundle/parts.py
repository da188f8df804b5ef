"""The probe and check parts of `llmdoctor triage`, each isolated: a part that fails is a skipped run
with the reason in the bundle, and the rest of the bundle is still written."""
from __future__ import annotations

import time
from pathlib import Path

from llmdoctor.reporting.probe_report import ProbeRecorder
from reference_engine.errors import ModelDirError



def run_checks_part(recorder: ProbeRecorder, model_dir: Path, device: str) -> str | None:
    """The quick checks via the public API; returns the model fingerprint."""
    try:
        import llmdoctor
        report = llmdoctor.check(model_dir, quick=True, device=device.split(":")[0], fail_on="error",
                                 ignore=["gpu"])  # the probe part measures the GPU once
    except Exception as exc:  # a bad model dir or settings file: say so in the bundle, keep collecting
        why = str(exc) if isinstance(exc, ModelDirError) else f"{type(exc).__name__}: {exc}"
        recorder.skip("llmdoctor-check", "files", f"checks not run: {' '.join(why.split())}")
        return None
    recorder.extend(report)
    recorder.device, recorder.dtype = report.device, report.dtype
    return report.fingerprint


def run_bandwidth_part(recorder: ProbeRecorder, device: str, size_bytes: int | None, runs: int, nvml_backend=None):
    from probes.bandwidth import bandwidth_findings, run_bandwidth_probe
    started = time.perf_counter()
    try:
        result = run_bandwidth_probe(device, size_bytes, runs, nvml_backend)
    except Exception as exc:  # e.g. CUDA out of memory on a busy GPU: still a bundle
        recorder.skip("GPU102", "gpu", f"bandwidth probe failed: {type(exc).__name__}: {exc}")
        return None
    recorder.add(bandwidth_findings(result), time.perf_counter() - started)
    return result


def run_roofline_part(recorder: ProbeRecorder, model_dir: Path, measured_bytes_per_s: float, device: str,
                      dtype: str) -> None:
    from probes.decode_roofline import roofline_finding, run_decode_roofline
    started = time.perf_counter()
    try:
        result = run_decode_roofline(model_dir, measured_bytes_per_s, device=device, dtype=dtype)
    except Exception as exc:  # isolated like a check: the bundle is still written
        recorder.skip("GPU103", "gpu", f"decode roofline not run: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return
    recorder.add([roofline_finding(result)], time.perf_counter() - started)


def run_kv_part(recorder: ProbeRecorder, model_dir: Path | None, requests: int, memory_budget: int | None = None,
                block_sizes=(1, 16, 256)) -> None:
    from probes.kv import DEFAULT_KV_BUDGET, DEFAULT_POOL_TOKENS, ModelKv, kv_findings, run_kv_probe
    from probes.kv_workload import SyntheticSpec, synthetic
    started = time.perf_counter()
    pool_tokens, max_len, per_token = DEFAULT_POOL_TOKENS, 4096, None
    if model_dir is not None:
        try:
            kv = ModelKv.from_dir(model_dir)
        except ModelDirError as exc:
            recorder.skip("KVC901", "kv_cache", f"KV probe not sized for the model: {exc}")
            kv = None
        if kv is not None:
            per_token, max_len = kv.bytes_per_token, min(kv.max_position_embeddings, 32768)
            pool_tokens = (memory_budget or DEFAULT_KV_BUDGET) // per_token
    spec = SyntheticSpec(requests=requests, max_total=max_len)
    try:
        result = run_kv_probe(synthetic(spec), spec.describe(), pool_tokens=max(pool_tokens, 1), max_len=max_len,
                              block_sizes=block_sizes, bytes_per_token=per_token)
    except Exception as exc:  # isolated like a check: the bundle is still written
        recorder.skip("KVC902", "kv_cache", f"KV probe failed: {type(exc).__name__}: {exc}")
        return
    recorder.add(kv_findings(result), time.perf_counter() - started)


def run_probes_part(recorder: ProbeRecorder, model_dir: Path | None, device: str, kv_requests: int,
                    bandwidth_bytes: int | None, nvml_backend=None) -> None:
    result = run_bandwidth_part(recorder, device, bandwidth_bytes, 3, nvml_backend)
    if model_dir is not None and result is not None:
        dev = "cuda" if result.device.startswith("cuda") else "cpu"
        run_roofline_part(recorder, model_dir, result.best_bytes_per_s, dev, "bfloat16" if dev == "cuda" else "float32")
    elif model_dir is None:
        recorder.skip("GPU103", "gpu", "no model directory given")
    run_kv_part(recorder, model_dir, kv_requests)


def run_endpoint_part(recorder: ProbeRecorder, model_dir: Path | None, options) -> None:
    """The EPT checks against options.url with model_dir as the reference (None: the server alone, judged by
    the competence probes EPT06x); isolated like the other parts."""
    from llmdoctor.run.endpoint_runner import run_endpoint
    try:
        report = run_endpoint(model_dir, options)
    except Exception as exc:  # an unreadable model or an unset API key variable: say so in the bundle
        recorder.skip("EPT001", "endpoint", f"endpoint not probed: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return
    recorder.extend(report)


# triage's load run: a few requests per level so the bundle stays quick
TRIAGE_LOAD = dict(concurrency=(1, 4), requests=8, max_tokens=16, duration_s=90.0, repeats=2)


def run_load_part(recorder: ProbeRecorder, model_dir: Path | None, options) -> None:
    """`probe load` with small defaults against options.url (EPT001 comes from the endpoint part)."""
    from llmdoctor.run.load_probe import run_load_report
    from probes.load import LoadOptions
    if model_dir is None:
        recorder.skip("EPT101", "endpoint", "no model directory given: the load probe needs a reference model")
        return
    load_options = LoadOptions(**TRIAGE_LOAD, timeout_s=options.timeout_s)
    try:
        report = run_load_report(model_dir, options.url, load_options, served_name=options.served_name,
                                 api_key_env=options.api_key_env, ignore=["EPT001"])
    except Exception as exc:  # an unreadable model or an unset API key variable: say so in the bundle
        recorder.skip("EPT101", "endpoint", f"load not probed: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return
    recorder.extend(report)
    recorder.load = report.load
