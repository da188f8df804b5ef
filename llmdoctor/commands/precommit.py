"""`llmdoctor-pre-commit FILES...`: the pre-commit hook (.pre-commit-hooks.yaml, id llmdoctor-check).

pre-commit passes the staged files that match the hook's pattern; each model they belong to (the directory
holding them, or a GGUF file itself) is checked once with `llmdoctor check`'s runner. By default only the
checks that read files, config, tokenizer and tensor headers run (seconds, no engine), which suits a commit
hook; `--select` widens it. Exit 1 when any model has a finding at or above --fail-on.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from llmdoctor.commands.options import known_option

# the static checks: no engine, weights read as headers (shapes, dtypes) only
DEFAULT_SELECT = "files,config,tokenizer,vocab,WGT001,WGT002,WGT003,WGT004"
CHECK_FORMATS = ("table", "github", "json", "markdown")


def model_paths(files: tuple[str, ...]) -> list[Path]:
    """The models the files belong to: a GGUF file is its own model, anything else its directory."""
    found: dict[str, Path] = {}
    for name in files:
        path = Path(name)
        model = path if path.suffix.lower() == ".gguf" else path.parent
        found.setdefault(model.as_posix(), model)
    return [found[key] for key in sorted(found)]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, type=click.Path(path_type=str))
@click.option("--select", default=DEFAULT_SELECT, show_default=True, metavar="IDS",
              help="Checks to run (ids, prefixes, categories or ALL; comma separated).")
@click.option("--ignore", default="", metavar="IDS", help="Checks to skip.")
@click.option("--fail-on", type=click.Choice(("error", "warning", "never")), default="error", show_default=True)
@click.option("--format", "fmt", type=click.Choice(CHECK_FORMATS), default="table", show_default=True)
@known_option
def main(files, select, ignore, fail_on, fmt, known):
    """Check the models that FILES belong to."""
    from llmdoctor.commands.options import emit
    from llmdoctor.run.runner import run_checks, validate_model_dir
    from llmdoctor.run.selection import parse_selectors
    from reference_engine.errors import ModelDirError

    failed = False
    for model in model_paths(files):
        try:
            root = validate_model_dir(model)
        except ModelDirError as e:
            click.echo(f"llmdoctor: skipping {model}: {' '.join(str(e).split())}", err=True)
            continue
        report = run_checks(root, select=parse_selectors((select,)) or None, ignore=parse_selectors((ignore,)),
                            fail_on=fail_on, device="cpu", quick=True)
        emit(report, fmt, None, known)
        failed = failed or report.exit_code() != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
