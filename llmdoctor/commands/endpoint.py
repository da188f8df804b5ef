"""`llmdoctor probe endpoint URL [--model MODEL]` (added to the `probe` group by llmdoctor.commands.probe)."""
from __future__ import annotations

from pathlib import Path

import click

from llmdoctor.commands.options import report_options


def endpoint_options(func):
    """--served-name / --api-key-env / --timeout, shared with `triage --endpoint`."""
    func = click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=60.0, show_default=True,
                        help="Seconds one request may take (`probe endpoint`: per 1024 tokens it sends or asks for, "
                              "the whole probe 10x this).")(func)
    func = click.option("--api-key-env", metavar="VAR", default=None,
                        help="Environment variable holding the API key (never written to the report).")(func)
    return click.option("--served-name", metavar="NAME", default=None,
                        help="Model name to put in requests [default: the first of /v1/models].")(func)


@click.command("endpoint")
@click.argument("url")
@click.option("--model", "model", type=click.Path(exists=True, path_type=Path), default=None,
              help="The reference: the model directory (Hugging Face) or GGUF file the server should be serving "
                   "[default: none; the server is judged alone by the competence probes, EPT06x].")
@endpoint_options
@click.option("--max-requests", type=click.IntRange(10), default=160,   # probes.endpoint.client.MAX_REQUESTS
              show_default=True,
              help="Most requests the probe sends (retries included).")
@click.option("--max-tokens", type=click.IntRange(8), default=48, show_default=True,
              help="Token limit of the live stop probe (a one-word answer must stop well before it).")
@click.option("--select", multiple=True, metavar="IDS",
              help="Run only these EPT checks (ids or prefixes, e.g. EPT07,EPT08 for the serving chain).")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these EPT checks.")
@click.option("--context", "context", type=click.IntRange(min=256), default=None, metavar="N",
              help="Read the server at distance up to N tokens (EPT121-EPT123; docs/context.md).")
@report_options
def probe_endpoint(url, model, served_name, api_key_env, timeout_s, max_requests, max_tokens, select, ignore, fmt,
                   output, fail_on, known, context):
    """Compare a live OpenAI-compatible server (URL: root or /v1) with the reference engine on MODEL (without
    --model: does the server talk sense at all, judged by the competence probes)."""
    import sys

    from llmdoctor.commands.options import InputError, emit
    from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
    from llmdoctor.run.output_guard import refuse_inside_model
    from llmdoctor.run.selection import parse_selectors
    from probes.endpoint import EndpointError
    if model is not None:
        refuse_inside_model(output, model if model.is_dir() else model.parent, "report")
    options = EndpointOptions(url, served_name, api_key_env, timeout_s, timeout_s * 10, max_requests, max_tokens,
                              context)
    try:
        report = run_endpoint(model, options, select=parse_selectors(select) or None,
                              ignore=parse_selectors(ignore) or None)
    except EndpointError as e:  # the API key variable is unset: the user's to fix
        raise InputError(str(e)) from None
    report.fail_on = fail_on
    emit(report, fmt, output, known)
    sys.exit(report.exit_code())
