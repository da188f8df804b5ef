"""The options several commands share, defined once, and what the commands do with them.

Each command module imports from here (never from llmdoctor.cli, which imports every command module to
register it), so any llmdoctor/cli_*.py imports alone.
"""
from __future__ import annotations

import io
import sys
from pathlib import Path

import click

FORMATS = ("table", "json", "junit", "markdown", "html")
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


def report_options(func):
    """--format, -o/--output and --fail-on of a command that writes a findings report (the probes)."""
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


def emit(report, fmt: str, output: Path | None) -> None:
    """Render to stdout, or to a file (written whole, so a failure leaves no half report behind)."""
    from reports import render
    from reports.common import summary_line
    if output is None:
        render(report, fmt, sys.stdout)
        return
    buffer = io.StringIO()
    render(report, fmt, buffer, **({"colour": False} if fmt == "table" else {}))
    try:
        output.write_text(buffer.getvalue(), encoding="utf-8")
    except OSError as e:
        raise InputError(f"{output}: cannot write report: {e.strerror or e}") from None
    click.echo(f"llmdoctor: {summary_line(report)}; {fmt} report written to {output}", err=True)
