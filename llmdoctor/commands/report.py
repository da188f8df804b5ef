"""`llmdoctor report REPORT.json --format F`: render a JSON report of an earlier run in another format, so a CI
job runs the checks once and writes SARIF, annotations and a step summary from the same result (action.yml)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from llmdoctor.commands.options import FAIL_ON, format_option, known_option, output_option


@click.command("report")
@click.argument("report_file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@format_option()
@output_option("Write the report to this file instead of stdout.")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default=None,
              help="Exit 1 when a finding is at or above this severity [default: the report's own].")
@known_option
def report_command(report_file, fmt, output, fail_on, known):
    """Render REPORT_FILE (a JSON report from `check`, `diff` or `probe`) as FMT; exit by --fail-on."""
    from llmdoctor.commands.options import InputError, emit
    from reports.json import from_dict
    try:
        report = from_dict(json.loads(report_file.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{report_file}: not a JSON report of llmdoctor ({type(e).__name__}: {e})") from None
    if fail_on is not None:
        report.fail_on = fail_on
    emit(report, fmt, output, known)
    sys.exit(report.exit_code())
