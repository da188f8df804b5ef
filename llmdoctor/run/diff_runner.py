"""Run the DIF checks on a pair of models (`llmdoctor diff REF CAND`) and collect a Report, with the same
isolation, selection, severities and exit codes as `check` (llmdoctor/run/runner.py)."""
from __future__ import annotations

import hashlib
from dataclasses import replace
import time
from datetime import datetime, timezone
from pathlib import Path

import checks
from checks.diff.pair import PairInputs
from findings import Finding, Report, Severity, fail_on_rank
from llmdoctor import __version__
from llmdoctor.run.fingerprint import fingerprint
from llmdoctor.reporting.locate import locate_report
from llmdoctor.run.progress import Progress
from llmdoctor.run.runner import run_all, validate_device
from llmdoctor.run.selection import select_checks
from llmdoctor.run.workloads import check_workload
from reference_engine.budget.plan import parse_size


def diff_checks(select: list[str] | None = None, ignore: list[str] | None = None):
    """The DIF checks chosen by --select/--ignore (selectors other than DIF ids pick nothing here)."""
    return [s for s in select_checks(checks.load_all(), select, ignore) if "pair" in s.needs]


def run_diff(ref: str | Path, cand: str | Path, *, text: str | None = None, select: list[str] | None = None,
             ignore: list[str] | None = None, fail_on: str = "error", device: str = "auto", dtype: str = "auto",
             quick: bool = False, thresholds: dict | None = None, memory_budget: int | str | None = None,
             ctx_len: int | None = None, chunks: int | None = None, progress: Progress | None = None,
             base: str | Path | None = None) -> Report:
    """Compare CAND against REF. ModelDirError (exit 2) for inputs that are not models or baselines.
    Either side may be a LoRA adapter directory, run on `base` (default: its local base_model_name_or_path)."""
    fail_on_rank(fail_on)
    validate_device(device)
    ref_side, cand_side = adapter_sides(ref, cand, base)
    chosen = diff_checks(select, ignore)
    budget = None if memory_budget is None else parse_size(memory_budget)
    ctx = PairInputs(ref_side.base, cand_side.base, device=device, dtype=dtype, quick=quick, thresholds=thresholds,
                      text=text, memory_budget=budget, ctx_len=ctx_len, chunks=chunks,
                      workload=check_workload(quick, device),
                      ref_adapter=ref_side.adapter, cand_adapter=cand_side.adapter)
    report = Report(model=f"{ref_side.label} vs {cand_side.label}", fingerprint=_fingerprints(ctx),
                    tool_version=__version__, generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    fail_on=fail_on)
    progress = progress or Progress(0, enabled=False)
    started = time.perf_counter()
    run_all(chosen, ctx, report, progress)
    if ref_side.adapter or cand_side.adapter:
        fail_uncompared(report)
    about = ctx.cand if ctx.cand.kind != "baseline" else ctx.ref   # findings are about the candidate
    locate_report(report, about.path)
    report.duration_s = time.perf_counter() - started
    report.device, report.dtype = ctx.device, ctx.dtype
    report.resources = ctx.build_seconds
    return report


def adapter_sides(ref, cand, base):
    """(Target, Target): each side's base and adapter; --base is for the side(s) that are adapters."""
    from llmdoctor.run.adapter_target import AdapterUsageError, is_adapter, resolve
    if base is not None and not (is_adapter(ref) or is_adapter(cand)):
        raise AdapterUsageError(f"--base {base}: neither {ref} nor {cand} is a LoRA adapter directory")
    return (resolve(ref, base if is_adapter(ref) else None),
            resolve(cand, base if is_adapter(cand) else None))


def fail_uncompared(report: Report) -> None:
    """An adapter diff answers "did the adapter / the merge do what it should": a comparison that could not run
    (a side failed to build) is an error, never a silent skip that lets a CI gate pass."""
    for i, run in enumerate(report.checks):
        if run.status == "skipped" and run.reason.startswith("needs "):
            report.checks[i] = replace(run, status="failed")
            report.findings.append(Finding(check=run.id, category=run.category, severity=Severity.ERROR,
                                           message=f"could not compare: {run.reason}",
                                           hint="Fix what the reason names (llmdoctor check ADAPTER --base BASE "
                                                "says what is wrong with the adapter)."))


def _fingerprints(ctx: PairInputs) -> str | None:
    """The pair's fingerprint: sha256 over both sides' fingerprints (HF directories; None when neither has
    one), in the report's usual 'sha256:<hex>' form so two diff reports of the same pair match."""
    prints = [fingerprint(s.path) if s.kind == "hf" else None for s in ctx.sides]
    if not any(prints):
        return None
    joined = "\0".join(p or f"-{s.path.name}" for p, s in zip(prints, ctx.sides))
    return "sha256:" + hashlib.sha256(joined.encode()).hexdigest()
