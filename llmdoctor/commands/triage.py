"""`llmdoctor triage [MODEL_DIR] -o BUNDLE`: collect an incident bundle (the work is in llmdoctor/incident_bundle/)."""
from __future__ import annotations

from pathlib import Path

import click

from llmdoctor.commands.endpoint import endpoint_options
from llmdoctor.commands.options import known_option, output_option


@click.command("triage")
@click.argument("model_dir", required=False, type=click.Path(file_okay=False, exists=True, path_type=Path))
@output_option("Bundle directory to write (created; must not be inside the model directory).", dest="bundle",
               required=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--kv-requests", type=click.IntRange(1), default=5000, show_default=True,
              help="Requests in the KV-cache probe's synthetic workload.")
@click.option("--no-checks", is_flag=True, help="Skip the quick checks (environment and probes only).")
@click.option("--endpoint", metavar="URL", default=None,
              help="Also compare this live server (OpenAI-compatible, root or /v1) with MODEL_DIR (EPT checks; "
                   "without MODEL_DIR the competence probes judge the server alone).")
@endpoint_options
@click.option("--format", "ci_formats", multiple=True, type=click.Choice(("sarif", "gitlab", "github")),
              help="Also write report.sarif / gl-code-quality-report.json into the bundle, or print GitHub "
                   "annotations (repeatable); the bundle always has JSON, Markdown and HTML.")
@known_option
@click.option("--load", "load", is_flag=True,
              help="With --endpoint: also load the server briefly (probe load with small defaults, EPT10x/11x).")
def triage(model_dir, bundle, device, kv_requests, no_checks, endpoint, served_name, api_key_env, timeout_s,
           ci_formats, known, load):
    """Collect an incident bundle: environment, GPU state, quick checks and probes (JSON, Markdown, HTML)."""
    from llmdoctor.incident_bundle.bundle import run_triage
    endpoint_options_ = None
    if endpoint:
        from llmdoctor.run.endpoint_runner import EndpointOptions
        endpoint_options_ = EndpointOptions(endpoint, served_name, api_key_env, timeout_s, timeout_s * 10)
    elif load:
        raise click.UsageError("--load needs --endpoint URL")
    result = run_triage(model_dir, bundle, device=device, kv_requests=kv_requests, run_checks=not no_checks,
                        endpoint=endpoint_options_, ci_formats=ci_formats, known=known, load=load)
    from reports.summary import summary_line
    click.echo(f"llmdoctor: triage: {summary_line(result.report)}")
    for path in result.files:
        click.echo(f"  {path}")
