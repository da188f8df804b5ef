"""Run the selected checks against one model directory and collect a Report.

Each check is isolated: a Skip or a missing resource makes it "skipped", an exception makes it "crashed" with
an error finding carrying the traceback, and the run goes on. Resources are built on first need only.
"""
from __future__ import annotations

import math
import sys
import time
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

import checks
from checks.shared import passes as shared_pass
from checks.catalogue.inputs import CheckInputs, ResourceError
from checks.catalogue.registry import CannotRun, CheckSpec, Problem, Skip, over_declaration
from llmdoctor import __version__
from llmdoctor.run.config_file import load_settings
from llmdoctor.run.fingerprint import fingerprint
from llmdoctor.reporting.locate import locate_report
from findings import CATEGORIES, CheckRun, Finding, Report, Severity, fail_on_rank
from findings.crash import describe
from llmdoctor.run.progress import Progress
from llmdoctor.run.honoured import (given_options, refuse_past_declared, refuse_unread, selected_ids,
                                    unhonoured)
from llmdoctor.run.workloads import run_workload
from llmdoctor.run.selection import category_selected, parse_selectors, select_checks
from reference_engine.config import model_dir_path
from reference_engine.errors import ModelDirError
from reference_engine.limits import return_freed_memory_to_os
from reference_engine.streaming.pipeline import PipelineError
from reference_engine.budget.plan import measured_peak, parse_size, start_peak

# a directory with none of these is not a model directory (exit 2), not a broken model (exit 1)
MODEL_FILE_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json",
                       "tokenizer_config.json", "generation_config.json", "*.bin", "*.gguf", "*.model")
CRASH_HINT = "A bug in this check or an input it did not foresee: report it with the traceback in evidence."


class DeviceError(ValueError):
    """--device cuda on a machine without a usable CUDA device."""


def validate_device(device: str) -> None:
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise DeviceError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")


def validate_model_dir(path: str | Path) -> Path:
    from reference_engine.files.gguf_file import find_gguf
    if Path(path).is_file():   # a GGUF file is a model; its header is checked by GGF001, not here
        if find_gguf(path) is None:
            raise ModelDirError(path, "not a model directory or GGUF file")
        return Path(path)
    root = model_dir_path(path)
    if root.is_dir() and not (root / "config.json").exists():
        find_gguf(root)   # a directory of several GGUF files: say which to pass (exit 2)
    if not any(any(root.glob(pattern)) for pattern in MODEL_FILE_PATTERNS):
        raise ModelDirError(root, "not a model directory (no config.json, tokenizer or weights files)")
    return root


def check(path: str | Path, *, select: Any = None, ignore: Any = None, fail_on: str | None = None,
          device: str | None = None, dtype: str | None = None, quick: bool | None = None,
          baseline: str | Path | None = None, use_config: bool = True, progress: bool = False,
          memory_budget: int | str | None = None, base: str | Path | None = None,
          context: int | None = None) -> Report:
    """Python API with the CLI's semantics: config file settings, overridden by the arguments given.
    path may be a LoRA adapter directory: base is its base model (default: base_model_name_or_path when local)."""
    from llmdoctor.run.adapter_target import resolve
    target = resolve(path, base)
    root = validate_model_dir(target.base)
    settings = load_settings(root) if use_config else None

    def pick(arg, key, default):
        if arg is not None:
            return arg
        configured = getattr(settings, key) if settings else None
        return default if configured is None else configured

    return run_checks(root, select=parse_selectors(pick(select, "select", None)) or None,
                      ignore=parse_selectors(pick(ignore, "ignore", None)),
                      fail_on=pick(fail_on, "fail_on", "error"), device=pick(device, "device", "auto"),
                      dtype=pick(dtype, "dtype", "auto"), quick=pick(quick, "quick", False),
                      thresholds=settings.thresholds if settings else {}, baseline=baseline,
                      progress=Progress(0, enabled=None if progress else False),
                      model_label=str(path) if target.adapter is None else target.label,
                      memory_budget=pick(memory_budget, "memory_budget", None), adapter=target.adapter,
                      context=context)


def run_checks(model_dir: str | Path, *, select: list[str] | None = None, ignore: list[str] | None = None,
               fail_on: str = "error", device: str = "auto", dtype: str = "auto", quick: bool = False,
               thresholds: dict | None = None, baseline: str | Path | None = None,
               progress: Progress | None = None, model_label: str | None = None,
               memory_budget: int | str | None = None, plan_stream=None, adapter: str | Path | None = None,
               context: int | None = None) -> Report:
    """memory_budget: bytes or '4GiB' (None: available memory minus headroom); the plan is made before any
    engine is loaded and raises plan.PlanError (exit 2) when not even one layer fits; plan_stream gets it.
    adapter: a LoRA adapter directory run on model_dir (its base): the LRA checks, then every model check on
    the adapted model. context: --context N, how far the CTX checks read (docs/context.md)."""
    fail_on_rank(fail_on)  # reject a bad level before doing any work
    peak_start = start_peak()      # the report's peak is this run's, not an earlier run's in this process
    root = validate_model_dir(model_dir)
    validate_device(device)
    # DIF checks compare two models: they run under `llmdoctor diff` (llmdoctor/run/diff_runner.py) only
    # LRA checks look at an adapter: they run when one is given
    elsewhere = {"pair", "servers", "endpoint", "load"} | (set() if adapter else {"adapter"})
    chosen = [s for s in select_checks(checks.load_all(), select, ignore) if not elsewhere & set(s.needs)]
    if adapter:      # the adapter's own checks first: they say why the engine checks after them may fail
        chosen.sort(key=lambda s: "adapter" not in s.needs)
    given = given_options(context, baseline)
    refuse_unread(chosen, given)                     # an option no chosen check reads: exit 2, nothing loaded
    named, asked = selected_ids(chosen, select)
    progress = progress or Progress(0, enabled=False)
    report = Report(model=model_label or str(model_dir), fingerprint=fingerprint(root), tool_version=__version__,
                    generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), fail_on=fail_on)
    ctx = CheckInputs(root, device=device, dtype=dtype, quick=quick, thresholds=thresholds, baseline=baseline,
                      memory_budget=None if memory_budget is None else parse_size(memory_budget),
                      adapter_dir=adapter, context_tokens=context,   # --context N: how far the CTX checks read
                      selected={spec.id for spec in chosen}, named=named, asked=asked,
                      given=given,                                   # a skip of a check reading one is an error
                      shared=shared_pass.declared(chosen),           # the engine runs chosen checks share
                      shared_runs=lambda ctx: prepare_shared(ctx, progress, plan_stream),
                      on_layer=progress.layer,
                      findings=report.findings,   # what ran before a check, for the competence checks' "look next"
                      workload=lambda ctx: run_workload(ctx, chosen, quick, device, context))  # every token read
    refuse_past_declared(ctx, context)
    plan = plan_engine(ctx, chosen, plan_stream)
    started = time.perf_counter()
    _add_load_errors(report, select, ignore)
    run_all(chosen, ctx, report, progress)
    if adapter:
        locate_adapter_findings(report, adapter)
    locate_report(report, root)    # each finding's file and line in the model, and its fingerprint
    report.duration_s = time.perf_counter() - started
    report.device, report.dtype = _resolved(ctx)
    report.resources = {name: seconds for name, seconds in ctx.build_seconds.items()}
    report.plan = plan_with_actuals(ctx, plan, report.duration_s, peak_start)
    return report


def locate_adapter_findings(report: Report, adapter: str | Path) -> None:
    """The LRA findings point into the adapter directory (adapter_config.json keys, adapter tensors), not the
    base's; located first, so locate_report leaves them as they are."""
    everything = report.findings
    report.findings = [f for f in everything if f.category == "adapter"]
    locate_report(report, adapter)
    located = iter(report.findings)
    report.findings = [next(located) if f.category == "adapter" else f for f in everything]


def run_all(chosen: list[CheckSpec], ctx, report: Report, progress) -> None:
    """Run the chosen checks in order into `report` (a crashed check never stops the others)."""
    progress.total = len(chosen)
    try:
        for spec in chosen:
            progress.start(f"{spec.id} {spec.summary}")
            run, findings = run_one(spec, ctx)
            report.checks.append(run)
            report.findings.extend(findings)
            progress.advance()
    finally:
        progress.close()


def plan_engine(ctx: CheckInputs, chosen: list[CheckSpec], stream=None):
    """The memory plan when a chosen check needs the engine (printed to `stream`); None otherwise or when
    the model cannot be planned (its checks then report why the engine cannot be built)."""
    if not any("engine" in spec.needs for spec in chosen):
        return None
    plan = ctx._plan_or_none()             # PlanError / PipelineError (exit 2) go up
    if plan is None:
        if ctx.plan_fallback is not None:
            from reference_engine.engine_builder import fallback_warning
            print(fallback_warning(ctx.plan_fallback), file=stream or sys.stderr, flush=True)
        return None
    announce_plan(plan, stream)
    if plan.streaming:      # the run's size should follow the one layer it holds, not creep up pass by pass
        return_freed_memory_to_os()
    return plan


def prepare_shared(ctx: CheckInputs, progress, stream) -> None:
    """The shared engine passes (checks/shared/passes.py), and a warning line for each run they left to its
    checks' own passes (the report's plan states them too: plan_with_actuals)."""
    shared_pass.prepare(ctx)
    for entry in shared_pass.fallbacks(ctx)[ctx.state.get("shared fallbacks warned", 0):]:
        progress.close()                    # clears the progress line (on a terminal), redrawn by the next check
        print(shared_pass.fallback_warning(entry), file=stream or sys.stderr, flush=True)
    ctx.state["shared fallbacks warned"] = len(shared_pass.fallbacks(ctx))


def announce_plan(plan, stream) -> None:
    """Print the plan before loading when a person watches (a TTY) or when it streams (a long run worth knowing
    about in a CI log too); a resident plan on a pipe stays out of stderr and lives in the JSON report."""
    if stream is None or plan is None:
        return
    if plan.streaming or (hasattr(stream, "isatty") and stream.isatty()):
        print(plan.summary(), file=stream, flush=True)


def plan_with_actuals(ctx: CheckInputs, plan, seconds: float, peak_start=None) -> dict | None:
    if plan is None and ctx.plan_fallback is not None:      # built resident without a budget: say why
        peak, source = measured_peak(ctx.requested_device, peak_start)
        return {"mode": "resident", "planned": False, "fallback": ctx.plan_fallback,
                "actual": {"seconds": round(seconds, 3), "peak_bytes": peak, "peak_source": source}}
    if plan is None:
        return None
    out = plan.to_dict()
    core = getattr(ctx._cache.get("engine"), "core", None)
    peak, source = measured_peak(plan.device, peak_start)
    out["actual"] = {"passes": getattr(core, "passes", 0 if core is not None else None),
                     "bytes_read": core.reader.bytes_read if hasattr(core, "reader") else None,
                     "seconds": round(seconds, 3), "peak_bytes": peak, "peak_source": source}
    if shared_pass.fallbacks(ctx):          # shared runs made in passes of their own, and why
        out["shared_fallback"] = shared_pass.fallbacks(ctx)
    return out


def run_one(spec: CheckSpec, ctx: CheckInputs) -> tuple[CheckRun, list[Finding]]:
    """Run one check in isolation; never raises (except KeyboardInterrupt and friends). A check the run asked
    for that cannot run fails with an error finding saying why (honoured.py), never a quiet skip."""
    findings: list[Finding] = []
    started, building_before = time.perf_counter(), ctx.total_build_seconds
    status, reason, blocked = "passed", "", False
    try:
        ctx.require(spec.needs)
        result = spec.func(ctx)
        for item in ([] if result is None else [result] if isinstance(result, Problem) else result):
            findings.append(to_finding(spec, item))
            wrong = over_declaration(spec, findings[-1].severity)
            if wrong is not None:  # the finding stays as emitted; the check is reported crashed
                raise wrong
    except PipelineError:
        raise                     # a dead rank or a timed-out collective ends the whole run
    except Skip as e:
        status, reason, blocked = "skipped", str(e) or "does not apply", isinstance(e, CannotRun)
    except ResourceError as e:
        status, reason, blocked = "skipped", f"needs {e.resource}: {e.message}", True
    except ModelDirError as e:       # the model itself cannot be read for this check: a finding, not a crash
        status, reason = "failed", e.problem
        findings.append(Finding(check=spec.id, category=spec.category, severity=Severity.ERROR,
                                message=f"the model cannot be read for this check: {e.problem}",
                                evidence={"path": e.path}, hint=UNREADABLE_HINT))
    except Exception as e:  # MemoryError/RecursionError too: described briefly, the failing frames released
        status, exception, (reason, tb) = "crashed", type(e).__name__, describe(e)
    if status == "crashed":     # built after the except block let go of the error and what it held
        findings.append(crash_finding(spec.id, spec.category, exception, reason, tb))
    error = unhonoured(spec, reason, blocked, ctx) if status == "skipped" else None
    if error is not None:
        status = "failed"
        findings.append(error)
    # the check's own time: loading weights or the engine for it is reported under report.resources
    duration = max(time.perf_counter() - started - (ctx.total_build_seconds - building_before), 0.0)
    if status == "passed" and any(f.severity.rank >= Severity.WARNING.rank for f in findings):
        status = "failed"
    return CheckRun(spec.id, spec.category, status, duration, spec.summary, reason), findings


def to_finding(spec: CheckSpec, item: Any) -> Finding:
    if not isinstance(item, Problem):
        raise TypeError(f"check {spec.id} produced {type(item).__name__}, expected checks.catalogue.registry.Problem")
    return Finding(check=spec.id, category=spec.category, severity=Severity.parse(item.severity or spec.severity),
                   message=item.message, evidence=jsonable(item.evidence or {}),
                   hint=spec.hint if item.hint is None else item.hint,
                   data=None if item.data is None else jsonable(item.data), location=item.location)


UNREADABLE_HINT = ("the file is malformed, or its metadata contradicts its tensors: re-convert or re-download it; "
                   "the other findings say which part")


def crash_finding(check_id: str, category: str, exception: str, reason: str, tb: str) -> Finding:
    return Finding(check=check_id, category=category, severity=Severity.ERROR, message=f"check crashed: {reason}",
                   evidence={"exception": exception, "traceback": tb}, hint=CRASH_HINT)


def _add_load_errors(report: Report, select: list[str] | None, ignore: list[str] | None) -> None:
    for error in checks.load_errors():
        short = error.module.rsplit(".", 1)[-1]
        category = short if short in CATEGORIES else "environment"
        if not category_selected(category, select, ignore):
            continue
        report.checks.append(CheckRun(error.module, category, "crashed", 0.0, "check module", error.message))
        report.findings.append(Finding(check=error.module, category=category, severity=Severity.ERROR,
                                       message=f"check module {error.module} failed to import: {error.message}",
                                       evidence={"traceback": error.traceback}, hint=CRASH_HINT))


def _resolved(ctx: CheckInputs) -> tuple[str, str]:
    try:
        return ctx.device, ctx.dtype
    except Exception:  # dtype may consult a broken config.json; the report still needs a value
        return ctx.requested_device, ctx.requested_dtype


def jsonable(value: Any) -> Any:
    """Evidence and plot data as plain JSON values: tensors -> numbers/lists, non-finite floats -> strings."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # JSON has no NaN/Infinity
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # torch tensors, numpy arrays and scalars
        return jsonable(value.tolist())
    if hasattr(value, "item"):
        return jsonable(value.item())
    return str(value)
