"""`llmdoctor probe endpoint URL [--model M]`: run the EPT checks against a live server.

Loads the reference (model directory or GGUF) first, so a bad model is a one-line error before any request
(without a model the checks that compare with one skip, and the competence probes judge the server alone);
then connects (lists models, detects the server kind) and runs every EPT check in isolation through the
runner's run_one. A dead server is EPT001's error finding, the rest skip with the reason. The API key comes
from an environment variable and is never written into the report.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import checks
from checks.endpoint.inputs import EndpointInputs
from checks.catalogue.inputs import ResourceError
from checks.endpoint.reference import Reference
from findings import Report
from llmdoctor import __version__
from llmdoctor.reporting.locate import locate_report
from llmdoctor.run.runner import run_one
from llmdoctor.run.selection import select_checks
from probes.endpoint import Budget, EndpointClient, EndpointError, api_key_from_env, connect
from probes.endpoint.client import MAX_REQUESTS, TOKENS_PER_TIMEOUT


@dataclass
class EndpointOptions:
    url: str
    served_name: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 60.0          # one request, per 1024 tokens it sends or asks for
    deadline_s: float = 600.0        # the whole probe
    max_requests: int = MAX_REQUESTS
    max_tokens: int = 48             # the live stop probe's limit
    context: int | None = None       # --context N: read the server at distance (EPT121-EPT123)


def endpoint_specs(select=None, ignore=None):
    return [s for s in select_checks(checks.load_all(), select or ["EPT"], ignore) if "endpoint" in s.needs]


def deadline(options: EndpointOptions) -> float:
    """The whole probe's seconds: --context N adds what its long prompts may take (EPT122 sends about 2.5 N tokens,
    each prompt waited for --timeout per TOKENS_PER_TIMEOUT of them; 3 N leaves room for the rest)."""
    extra = options.timeout_s * 3 * options.context / TOKENS_PER_TIMEOUT if options.context else 0.0
    return options.deadline_s + extra


NO_MODEL = ResourceError("reference", "no --model given: nothing to compare the server with")


def run_endpoint(model: str | Path | None, options: EndpointOptions, *, reference: Reference | None = None,
                 transport=None, select=None, ignore=None) -> Report:
    """The EPT report (model None: the server alone). ModelDirError for an unreadable model, EndpointError for an
    unset API key variable."""
    started = time.perf_counter()
    api_key = api_key_from_env(options.api_key_env)
    if reference is None and model is not None:
        reference = Reference.load(model)
    budget = Budget(max_requests=options.max_requests, deadline_s=deadline(options), timeout_s=options.timeout_s)
    client = EndpointClient(options.url, api_key, budget, transport)
    report = Report(model=str(model) if model is not None else client.root, fingerprint=None,
                    tool_version=__version__, generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    try:
        try:
            connection = connect(client, options.served_name)
        except EndpointError as e:
            connection = e
        ctx = EndpointInputs(client.root, reference or NO_MODEL, connection, max_tokens=options.max_tokens,
                             context_tokens=options.context)
        for spec in endpoint_specs(select, ignore):
            run, findings = run_one(spec, ctx)
            report.checks.append(run)
            report.findings.extend(findings)
    finally:
        client.close()
    for finding in report.findings_for("EPT001"):
        finding.evidence["requests"] = {"count": len(client.log),
                                        "seconds": round(sum(r["seconds"] for r in client.log), 3),
                                        "log": client.log}
    locate_report(report, model)    # the reference model's files: generation_config.json, the chat template, ...
    report.duration_s = time.perf_counter() - started
    return report

