"""The --known option, shared by check, diff and the probes (a module of its own so that every command module
can import it without importing llmdoctor.cli)."""
from __future__ import annotations

from pathlib import Path

import click


def known_option(func):
    """--known REPORT.json: findings of an earlier run are reported as known and do not fail the gate."""
    return click.option("--known", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        metavar="REPORT.json",
                        help="A JSON report of an earlier run: findings found in it (by fingerprint) are marked known "
                             "and do not fail the run; new ones do (docs/ci.md).")(func)
