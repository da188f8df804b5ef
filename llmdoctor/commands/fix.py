"""`llmdoctor fix`: write a repaired copy of a model directory, then re-run the vocab and embedding checks on it."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from llmdoctor.commands.options import output_option

VERIFY = ["vocab", "embeddings"]


@click.command("fix")
@click.argument("model_dir", type=click.Path(file_okay=False, path_type=Path))
@output_option("Directory to write the repaired copy to (must not exist, or be empty; never MODEL_DIR).",
               dest="out_dir", required=True)
@click.option("--vocab", is_flag=True,
              help="Resize embedding and lm_head (and config.vocab_size) to exactly cover the tokenizer.")
@click.option("--untrained-embeddings", is_flag=True,
              help="Set untrained special-token rows to the mean of the trained rows (embedding and lm_head).")
def fix_command(model_dir, out_dir, vocab, untrained_embeddings):
    """Write a repaired copy of MODEL_DIR to --output (the source is never modified)."""
    from llmdoctor.repair.repaired_copy import expected_after_fix, fix_model
    from llmdoctor.run.runner import run_checks

    if not (vocab or untrained_embeddings):
        raise click.UsageError("choose what to fix: --vocab and/or --untrained-embeddings")
    result = fix_model(model_dir, out_dir, vocab=vocab, untrained_embeddings=untrained_embeddings)
    for line in result.actions or ["nothing needed fixing; wrote an identical copy"]:
        click.echo(f"changed: {line}")
    click.echo(f"wrote {result.out_dir} (rewritten: {', '.join(result.rewritten) or 'none'}; the rest copied)")
    report = run_checks(result.out_dir, select=VERIFY)
    for finding in (f for f in report.findings if expected_after_fix(f, result.reinitialised)):
        click.echo(f"needs training: {finding.check} {finding.severity.value}: {finding.message}")
    remaining = [f for f in report.findings if f.severity.value != "info"
                 and not expected_after_fix(f, result.reinitialised)]
    for finding in remaining:
        click.echo(f"still: {finding.check} {finding.severity.value}: {finding.message}", err=True)
    if remaining:
        click.echo(f"llmdoctor: the copy still has {len(remaining)} vocab/embedding finding(s)", err=True)
        sys.exit(1)
    if result.reinitialised:
        where = ", ".join(f"{len(ids)} in {name}" for name, ids in result.reinitialised.items())
        click.echo(f"vocab and embedding checks on the copy: nothing else to fix; the re-initialised rows ({where}) "
                   "have no trained meaning yet: fine-tune with trainable embeddings before relying on those tokens")
    else:
        click.echo("vocab and embedding checks on the copy: no warnings or errors")
