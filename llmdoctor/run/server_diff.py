"""`llmdoctor diff URL_A URL_B`: two live OpenAI-compatible servers compared request by request (the DIF07x
checks, checks/diff/servers/), with the report, selection and exit codes of `diff DIR DIR`.

Both servers are connected before any check runs (the model list, then the server kind): a server that cannot be
reached or does not speak the OpenAI API is a one-line error (exit 2) naming the URL, since nothing can be
compared without it. Each side gets its own request budget (--timeout per request, ten times it for the run).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import checks
from checks.diff.servers.inputs import ServerOptions, ServerPairInputs, ServerSide
from findings import Report, fail_on_rank
from llmdoctor import __version__
from llmdoctor.run.runner import run_one
from llmdoctor.run.selection import select_checks
from probes.endpoint import Budget, EndpointClient, EndpointError, api_key_from_env, connect

URL_SCHEMES = ("http://", "https://")


class ServerDiffError(Exception):
    """A server that cannot be compared (unreachable, not OpenAI-compatible) or an unset API key: one line."""


@dataclass
class ServerDiffOptions:
    requests: ServerOptions = field(default_factory=ServerOptions)
    timeout_s: float = 60.0
    api_key_env: str | None = None
    served_names: tuple[str | None, str | None] = (None, None)


def is_url(arg: str | Path) -> bool:
    return str(arg).strip().lower().startswith(URL_SCHEMES)


def server_diff_checks(select=None, ignore=None):
    return [s for s in select_checks(checks.load_all(), select, ignore) if "servers" in s.needs]


def _connect(role: str, url: str, options: ServerDiffOptions, api_key, transport) -> tuple[ServerSide, EndpointClient]:
    budget = Budget(max_requests=40 + 4 * options.requests.prompts, deadline_s=options.timeout_s * 10,
                    timeout_s=options.timeout_s)
    client = EndpointClient(url, api_key, budget, transport)
    served = options.served_names[0 if role == "reference" else 1]
    try:
        connection = connect(client, served)
    except EndpointError as e:
        client.close()
        fix = ("start it, or check the URL/port" if e.status is None and not e.limit else
               "give the root (or /v1) URL of an OpenAI-compatible server" if e.status else "raise --timeout")
        raise ServerDiffError(f"{url}: not an OpenAI-compatible server that answers ({e}); {fix}") from None
    except ValueError as e:      # /v1/models answered with something that is not its JSON shape
        client.close()
        raise ServerDiffError(f"{url}: GET /v1/models does not answer as an OpenAI-compatible server ({e})") from None
    return ServerSide(role, client.root, connection), client


def run_server_diff(url_a: str, url_b: str, options: ServerDiffOptions | None = None, *, tokenizer=None,
                    select=None, ignore=None, fail_on: str = "error", thresholds: dict | None = None,
                    transports=(None, None)) -> Report:
    """Compare the server at url_b (candidate) with the one at url_a (reference). ServerDiffError for a server
    that cannot be compared; `tokenizer`: the --model directory's, counting the prompts."""
    fail_on_rank(fail_on)
    options = options or ServerDiffOptions()
    started = time.perf_counter()
    try:
        api_key = api_key_from_env(options.api_key_env)
    except EndpointError as e:
        raise ServerDiffError(str(e)) from None
    chosen = server_diff_checks(select, ignore)
    clients = []
    try:
        ref, client = _connect("reference", url_a, options, api_key, transports[0])
        clients.append(client)
        cand, client = _connect("candidate", url_b, options, api_key, transports[1])
        clients.append(client)
        ctx = ServerPairInputs(ref, cand, options.requests, tokenizer, thresholds or {})
        report = Report(model=f"{ref.url} vs {cand.url}", fingerprint=None, tool_version=__version__,
                        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), fail_on=fail_on)
        for spec in chosen:
            run, findings = run_one(spec, ctx)
            report.checks.append(run)
            report.findings.extend(findings)
    finally:
        for client in clients:
            client.close()
    for finding in report.findings:
        finding.evidence.setdefault("servers", {"reference": ref.label, "candidate": cand.label})
    report.duration_s = time.perf_counter() - started
    return report
