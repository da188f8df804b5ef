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
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from findings import Finding, Report
from llmdoctor.run.output_guard import OutputError, refuse_inside_model
from probes.environment import collect_environment, environment_problems
from llmdoctor.reporting.probe_report import ProbeRecorder

BUNDLE_FILES = ("report.json", "report.md", "report.html", "environment.json")


@dataclass
class TriageResult:
    bundle: Path
    report: Report
    files: list[Path] = field(default_factory=list)


def environment_finding(env: dict) -> Finding:
    problems = environment_problems(env)
    t = env["torch"]
    gpus = env["nvml"].get("status", "")
    message = (f"Python {env['python']['version']}, torch {t['version']} (CUDA build {t['cuda_build'] or 'none'}), "
               f"{env['cpu']['logical_cores']} CPU cores, "
               f"{env['memory'].get('MemTotal', 0) / 2**30:.1f} GiB RAM; {gpus}")
    if problems:
        message += f"; {problems[0]}"
    return Finding("ENV101", "environment", "warning" if problems else "info", message,
                   evidence={**env, "problems": problems},
                   hint="install the torch build matching this driver and GPU (see problems)" if problems else "")


def run_triage(model_dir: str | Path | None, bundle: str | Path, *, device: str = "auto", kv_requests: int = 5000,
               bandwidth_bytes: int | None = None, run_checks: bool = True, nvml_backend=None,
               endpoint=None, ci_formats=(), known=None, load: bool = False) -> TriageResult:
    from llmdoctor.incident_bundle.parts import run_checks_part, run_probes_part
    root = Path(model_dir) if model_dir is not None else None
    bundle = Path(bundle)
    refuse_inside_model(bundle, root, "triage bundle")
    try:
        bundle.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{bundle}: cannot create the bundle directory: {e.strerror or e}") from None
    recorder = ProbeRecorder(str(model_dir) if model_dir is not None else "(no model)")
    started = time.perf_counter()
    env = collect_environment(nvml_backend)
    recorder.add([environment_finding(env)], time.perf_counter() - started)
    fingerprint = run_checks_part(recorder, root, device) if (root is not None and run_checks) else None
    run_probes_part(recorder, root, device, kv_requests, bandwidth_bytes, nvml_backend)
    if endpoint is not None:  # run/endpoint_runner.EndpointOptions: the live server vs this model (EPT checks)
        from llmdoctor.incident_bundle.parts import run_endpoint_part
        run_endpoint_part(recorder, root, endpoint)
    if endpoint is not None and load:  # a short load run against the same server (EPT10x/EPT11x, small defaults)
        from llmdoctor.incident_bundle.parts import run_load_part
        run_load_part(recorder, root, endpoint)
    report = recorder.report(fail_on="error", fingerprint=fingerprint)
    report.load = getattr(recorder, "load", None)
    from llmdoctor.reporting.locate import mark_known
    mark_known(report, known)
    files = write_bundle(report, env, bundle, ci_formats)
    return TriageResult(bundle, report, files)


CI_FILES = {"sarif": "report.sarif", "gitlab": "gl-code-quality-report.json"}   # triage --format


def write_bundle(report: Report, env: dict, bundle: Path, ci_formats=()) -> list[Path]:
    import sys

    from llmdoctor.reporting.ci_rules import render_options
    from reports import render
    outputs = {"report.json": "json", "report.md": "markdown", "report.html": "html"}
    outputs.update({CI_FILES[fmt]: fmt for fmt in ci_formats if fmt in CI_FILES})
    if "github" in ci_formats:   # annotations belong on stdout, where the runner reads workflow commands
        render(report, "github", sys.stdout)
    files = []
    for name, fmt in outputs.items():
        buffer = io.StringIO()
        render(report, fmt, buffer, **render_options(report, fmt))
        (bundle / name).write_text(buffer.getvalue(), encoding="utf-8")
        files.append(bundle / name)
    (bundle / "environment.json").write_text(json.dumps(env, indent=2, sort_keys=True, default=str), encoding="utf-8")
    files.append(bundle / "environment.json")
    return files


def crash_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
