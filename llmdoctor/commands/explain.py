"""`llmdoctor explain QUERY`: a check id's explanation, a family's or category's list, or an error message's
diagnosis (the text comes from llmdoctor/reporting/explain_text.py)."""
from __future__ import annotations

import sys

import click

from llmdoctor.commands.options import EXIT_USAGE


@click.command("explain")
@click.argument("query", nargs=-1, required=True)
def explain_command(query):
    """Explain a check id (VOC001), list a family or category, or diagnose an error message."""
    from llmdoctor.reporting.explain_text import explain
    text, code = explain(" ".join(query))
    click.echo(text, err=code == EXIT_USAGE)
    sys.exit(code)
