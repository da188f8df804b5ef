"""The options several commands share, defined once, and what the commands do with them.

Each command module imports from here (never from llmdoctor.cli, which imports every command module to
register it), so any llmdoctor/commands/*.py imports alone.
"""
from __future__ import annotations

import io
import sys
from pathlib import Path

import click

from reports import FORMATS  # table, json, junit, markdown, html, sarif, github, gitlab

EXIT_USAGE = 2                  # usage or input error (0: nothing at or above --fail-on, 1: a finding at or above)
FAIL_ON = ("error", "warning", "never")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")


class InputError(Exception):
    """Bad input the user can fix; printed as one line."""


def format_option(help: str = "Report format.", choices: tuple[str, ...] = FORMATS):
    return click.option("--format", "fmt", type=click.Choice(choices), default="table", show_default=True,
                        help=help)


def output_option(help: str = "Write the report to this file instead of stdout (never inside the model "
                              "directory).", *, dest: str = "output", required: bool = False):
    return click.option("--output", "-o", dest, type=click.Path(path_type=Path), default=None, required=required,
                        help=help)


def fail_on_option(default: str | None = "error"):
    """--fail-on; default None lets the configuration file decide (`check`), hence the default in the help."""
    if default is None:
        return click.option("--fail-on", type=click.Choice(FAIL_ON), default=None,
                            help="Exit 1 when a finding is at or above this severity [default: error].")
    return click.option("--fail-on", type=click.Choice(FAIL_ON), default=default, show_default=True,
                        help="Exit 1 when a finding is at or above this severity.")


def device_option(help: str = "Device to run on.", default: str | None = "auto"):
    return click.option("--device", type=click.Choice(DEVICES), default=default, show_default=default is not None,
                        help=help)


def dtype_option(help: str = "Compute dtype (auto = float32 on cpu, the config's dtype on cuda).",
                 default: str | None = "auto"):
    return click.option("--dtype", type=click.Choice(DTYPES), default=default, show_default=default is not None,
                        help=help)


def memory_budget_option(help: str = "Memory the engine may use (e.g. 4GiB); a model that does not fit streams "
                                     "one layer at a time."):
    return click.option("--memory-budget", default=None, metavar="SIZE", help=help)


def _readable_report(ctx, param, value: Path | None) -> Path | None:
    """Refuse a --known file that is not a JSON report before any work is done (exit 2)."""
    if value is not None:
        from llmdoctor.reporting.locate import KnownReportError, load_known
        try:
            load_known(value)
        except KnownReportError as e:
            raise click.BadParameter(str(e)) from None
    return value


def known_option(func):
    """--known REPORT.json: findings of an earlier run are reported as known and do not fail the gate."""
    return click.option("--known", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        metavar="REPORT.json", callback=_readable_report,
                        help="A JSON report of an earlier run: findings found in it (by fingerprint) are marked known "
                             "and do not fail the run; new ones do (docs/ci.md).")(func)


def report_options(func):
    """--format, -o/--output, --fail-on and --known of a command that writes a findings report (the probes)."""
    func = known_option(func)
    func = fail_on_option()(func)
    func = output_option("Write the report to this file instead of stdout (never inside the model).")(func)
    return format_option("Report format (html draws the plots).")(func)


def budget_option(value: str | None, settings) -> int | None:
    """--memory-budget SIZE (or memory-budget in the config file) in bytes; InputError when malformed."""
    from reference_engine.budget.plan import parse_size
    value = value if value is not None else getattr(settings, "memory_budget", None)
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as e:
        raise InputError(f"--memory-budget: {e}") from None


def emit(report, fmt: str, output: Path | None, known: Path | None = None) -> None:
    """Mark the findings a --known report holds, then render to stdout, or to a file (written whole, so a
    failure leaves no half report behind)."""
    from llmdoctor.reporting.ci_rules import render_options
    from llmdoctor.reporting.locate import mark_known
    from reports import render
    from reports.summary import summary_line
    mark_known(report, known)
    options = render_options(report, fmt)     # the SARIF rules: docstrings and explain texts
    if output is None:
        render(report, fmt, sys.stdout, **options)
        return
    buffer = io.StringIO()
    render(report, fmt, buffer, **options, **({"colour": False} if fmt == "table" else {}))
    try:
        output.write_text(buffer.getvalue(), encoding="utf-8")
    except OSError as e:
        raise InputError(f"{output}: cannot write report: {e.strerror or e}") from None
    click.echo(f"llmdoctor: {summary_line(report)}; {fmt} report written to {output}", err=True)
