"""`llmdoctor probe load URL --model MODEL` (added to the `probe` group by llmdoctor.commands.probe)."""
from __future__ import annotations

from pathlib import Path

import click

from llmdoctor.commands.endpoint import endpoint_options
from llmdoctor.commands.options import report_options


def _numbers(kind):
    def parse(ctx, param, value):
        if value is None:
            return ()
        try:
            values = tuple(kind(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            raise click.BadParameter(f"expected comma-separated numbers, found {value!r}") from None
        if not values or any(v <= 0 for v in values):
            raise click.BadParameter("expected numbers > 0")
        return values
    return parse


@click.command("load")
@click.argument("url")
@click.option("--model", "model", type=click.Path(exists=True, path_type=Path), required=True,
              help="The reference: the model directory (Hugging Face) or GGUF file the server should be serving.")
@endpoint_options
@click.option("--concurrency", default="1,4,8", show_default=True, callback=_numbers(int),
              help="Closed-loop levels: requests kept in flight, comma-separated (the largest also caps the "
                   "open-loop levels and the correctness phase).")
@click.option("--requests", type=click.IntRange(1, 10000), default=32, show_default=True,
              help="Requests per level.")
@click.option("--rate", default=None, callback=_numbers(float),
              help="Open-loop levels: Poisson arrivals per second, comma-separated (after the closed-loop levels).")
@click.option("--max-tokens", type=click.IntRange(2, 4096), default=64, show_default=True,
              help="Output tokens per request (ignore_eos where the server has it).")
@click.option("--slo-ttft-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Goodput SLO: time to first token, ms.")
@click.option("--slo-tpot-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Goodput SLO: time per output token, ms.")
@click.option("--duration", "duration_s", type=click.FloatRange(min=5), default=300.0, show_default=True,
              help="Hard limit on the whole probe, seconds (what does not fit is reported as skipped).")
@click.option("--repeats", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Times each correctness probe is asked alone and again under load.")
@click.option("--no-correctness", is_flag=True, help="Latency levels only (no answers compared under load).")
@report_options
def probe_load(url, model, served_name, api_key_env, timeout_s, concurrency, requests, rate, max_tokens,
               slo_ttft_ms, slo_tpot_ms, duration_s, repeats, no_correctness, fmt, output, fail_on, known):
    """Load a live server (URL: root or /v1): latency percentiles, /metrics, answers that change under load."""
    import sys

    from llmdoctor.commands.options import InputError, emit
    from llmdoctor.run.load_probe import run_load_report
    from llmdoctor.run.output_guard import refuse_inside_model
    from probes.endpoint import EndpointError
    from probes.load import LoadOptions
    refuse_inside_model(output, model if model.is_dir() else model.parent, "report")
    options = LoadOptions(concurrency=concurrency, requests=requests, rates=rate, max_tokens=max_tokens,
                          slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, duration_s=duration_s,
                          timeout_s=timeout_s, repeats=repeats, correctness=not no_correctness)
    try:
        report = run_load_report(model, url, options, served_name=served_name, api_key_env=api_key_env)
    except EndpointError as e:  # the API key variable is unset: the user's to fix
        raise InputError(str(e)) from None
    report.fail_on = fail_on
    emit(report, fmt, output, known)
    sys.exit(report.exit_code())
