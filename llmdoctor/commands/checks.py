"""`llmdoctor checks`: list the catalogue (id, category, severity, needs, summary) and the retired ids."""
from __future__ import annotations

import click

from llmdoctor.commands.options import format_option


@click.command("checks")
@click.option("--select", multiple=True, metavar="IDS", help="Only these ids, prefixes or categories.")
@format_option("Catalogue format.", choices=("table", "json"))
def checks_command(select, fmt):
    """List every check: id, category, severity, what it needs and its summary."""
    import json

    from tabulate import tabulate

    import checks as catalogue
    from llmdoctor.run.selection import parse_selectors, select_checks
    specs = select_checks(catalogue.load_all(), parse_selectors(select) or None)
    if fmt == "json":
        rows = [{"id": s.id, "category": s.category, "severity": s.severity.value, "needs": list(s.needs),
                 "summary": s.summary, "hint": s.hint} for s in specs]
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
    else:
        click.echo(tabulate([[s.id, s.category, s.severity.value, ",".join(s.needs), s.summary] for s in specs],
                            headers=["id", "category", "severity", "needs", "summary"], tablefmt="simple"))
        click.echo(f"\n{len(specs)} checks")
        from checks.catalogue.registry import RETIRED
        click.echo("retired ids (still accepted by --select/--ignore/explain): "
                   + ", ".join(f"{old} -> {new}" for old, (new, _) in sorted(RETIRED.items())))
    for error in catalogue.load_errors():
        click.echo(f"llmdoctor: warning: check module {error.module} failed to import: {error.message}", err=True)
