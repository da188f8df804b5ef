"""The --known option, shared by check, diff and the probes (a module of its own so that every command module
can import it without importing llmdoctor.cli)."""
from __future__ import annotations

from pathlib import Path

import click


def _readable_report(ctx, param, value: Path | None) -> Path | None:
    """Refuse a --known file that is not a JSON report before any work is done (exit 2)."""
    if value is not None:
        from llmdoctor.locate import KnownReportError, load_known
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
