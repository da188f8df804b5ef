"""`llmdoctor probe load URL --model M`: load a live server, then run the EPT10x/EPT11x checks on what it did.

The reference is read first (a bad model is a one-line error before any request); then the server is connected
(EPT001 reports a dead or wrong server and the load checks are skipped), loaded level by level, probed for
answers that change under load, and the checks run on the measurements. The report's `load` object holds the
level numbers (docs/load.md).
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import checks
from checks.catalogue.inputs import ResourceError
from checks.endpoint.inputs import EndpointInputs
from checks.endpoint.load.inputs import LoadInputs
from checks.endpoint.reference import Reference
from findings import Report
from llmdoctor import __version__
from llmdoctor.run.runner import run_one
from llmdoctor.run.selection import select_checks
from probes.endpoint import Budget, EndpointClient, EndpointError, api_key_from_env, connect
from probes.load import LoadOptions, run_load


def load_specs(select=None, ignore=None):
    """EPT001 (can the server be asked) and the checks that read a load run."""
    chosen = select_checks(checks.load_all(), select or ["EPT"], ignore)
    return [s for s in chosen if s.id == "EPT001" or "load" in s.needs]


def run_load_report(model: str | Path, url: str, options: LoadOptions, *, served_name: str | None = None,
                    api_key_env: str | None = None, reference: Reference | None = None, transport=None,
                    select=None, ignore=None) -> Report:
    """The load report. ModelDirError for an unreadable model, EndpointError for an unset API key variable."""
    started = time.perf_counter()
    api_key = api_key_from_env(api_key_env)
    reference = reference or Reference.load(model)
    # the probe answers go through the endpoint client: every one counted, retried politely, and inside the
    # run's hard time limit (its deadline starts now, with the run)
    budget = Budget(max_requests=20 + 4 * options.repeats * 3, deadline_s=options.duration_s,
                    timeout_s=options.timeout_s)
    client = EndpointClient(url, api_key, budget, transport)
    report = Report(model=str(model), fingerprint=None, tool_version=__version__,
                    generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    try:
        try:
            connection = connect(client, served_name)
        except EndpointError as e:
            connection = e
        specs = load_specs(select, ignore)
        reach = EndpointInputs(client.root, reference, connection)
        for spec in (s for s in specs if s.id == "EPT001"):
            _run(report, spec, reach)
        if isinstance(connection, EndpointError):
            ctx = LoadInputs(client.root, None, options, skip_reason=f"the server could not be reached: {connection}")
        else:
            run = run_load(connection.surface, options, api_key=api_key, transport=transport)
            ctx = LoadInputs(client.root, run, options, connection.surface, _reference_or_error(reference))
        for spec in (s for s in specs if s.id != "EPT001"):
            _run(report, spec, ctx)
        if ctx.run is not None:
            report.load = load_object(ctx, connection.surface)
    finally:
        client.close()
    report.duration_s = time.perf_counter() - started
    return report


def _run(report: Report, spec, ctx) -> None:
    run, findings = run_one(spec, ctx)
    report.checks.append(run)
    report.findings.extend(findings)


def _reference_or_error(reference: Reference):
    return reference if reference is not None else ResourceError("engine", "no reference")


def load_object(ctx: LoadInputs, surface) -> dict:
    """The report's `load` object: what was asked, each level's numbers, the server's metrics, the answers."""
    o, run = ctx.options, ctx.run
    return {
        "server": surface.kind,
        "model": surface.model,
        "options": {"concurrency": list(o.concurrency), "rates": list(o.rates), "requests": o.requests,
                    "max_tokens": o.max_tokens, "slo_ttft_ms": o.slo_ttft_ms, "slo_tpot_ms": o.slo_tpot_ms,
                    "duration_s": o.duration_s, "timeout_s": o.timeout_s, "repeats": o.repeats},
        "levels": ctx.levels,
        "wall_s": round(run.wall_s, 3),
        "skipped": run.skipped,
        "metrics": {"scrapes": len(run.scrapes), "error": run.metrics_error,
                    "last": run.scrapes[-1].values if run.scrapes else None},
        "correctness": {"solo_answers": len(run.solo), "loaded_answers": len(run.loaded),
                        "background_requests": len(run.background), "background_clients": run.background_workers,
                        "probe_clients": run.probe_workers, "classes": ctx.classes if run.solo else []},
    }
