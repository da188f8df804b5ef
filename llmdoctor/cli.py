"""The `llmdoctor` command line (click).

Exit codes: 0 = nothing at or above --fail-on, 1 = a finding at or above it, 2 = usage or input error.
Bad input is reported as one line on stderr, never as a traceback."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from llmdoctor import __version__
from llmdoctor.commands.baseline import baseline_command
from llmdoctor.commands.diff import diff_command
from llmdoctor.commands.fix import fix_command
from llmdoctor.commands.generate import generate_command
from llmdoctor.commands.options import (FORMATS, InputError, budget_option, device_option, dtype_option, emit,
                                   fail_on_option, format_option, known_option, memory_budget_option,
                                   output_option)
from llmdoctor.commands.probe import probe, triage
from llmdoctor.commands.report import report_command

EXIT_USAGE = 2
DEMO_MODEL = Path(__file__).parent / "demo_model"
__all__ = ["cli", "DEMO_MODEL", "EXIT_USAGE", "FORMATS", "InputError", "budget_option", "emit"]


def input_errors() -> tuple[type[Exception], ...]:
    from checks.catalogue.inputs import ResourceError, ThresholdError
    from llmdoctor.run.config_file import ConfigFileError
    from llmdoctor.report.locate import KnownReportError
    from llmdoctor.run.runner import DeviceError
    from llmdoctor.run.selection import SelectionError
    from llmdoctor.run.output_guard import OutputError
    from llmdoctor.run.adapter_target import AdapterUsageError
    from llmdoctor.run.honoured import OptionError
    from reference_engine.errors import ModelDirError
    from reference_engine.streaming.pipeline import PipelineError
    from reference_engine.budget.plan import PlanError
    return (InputError, ModelDirError, ConfigFileError, SelectionError, ThresholdError, DeviceError, ResourceError,
            OutputError, PlanError, PipelineError, KnownReportError, AdapterUsageError, OptionError)


class DoctorGroup(click.Group):
    """Turns bad input into `llmdoctor: error: <one line>` and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except input_errors() as e:
            click.echo(f"llmdoctor: error: {one_line(e)}", err=True)
            ctx.exit(EXIT_USAGE)
        except KeyboardInterrupt:
            click.echo("llmdoctor: interrupted", err=True)
            ctx.exit(130)
        except (MemoryError, RecursionError) as e:   # outside any check (those are contained by the runner)
            from findings.crash import describe
            reason, _ = describe(e)                  # brief, the failing frames released first
                                                     # (formatting them could need the memory that ran out)
            click.echo(f"llmdoctor: error: ran out of {'memory' if isinstance(e, MemoryError) else 'stack'} "
                       f"({reason})", err=True)
            ctx.exit(EXIT_USAGE)


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


@click.group(cls=DoctorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="llmdoctor", message="%(prog)s %(version)s")
def cli():
    """Find what is wrong with an LLM: checkpoint files, config, weights, tokenizer, numerics and GPU."""


@cli.command("check")
@click.argument("path", required=False, type=click.Path(file_okay=True, dir_okay=True, path_type=str))
@click.option("--select", multiple=True, metavar="IDS",
              help="Run only these checks: ids (VOC001), id prefixes (VOC), categories (vocab) or ALL; "
                   "comma separated or repeated.")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these checks (same syntax as --select).")
@format_option()
@output_option()
@fail_on_option(default=None)
@device_option("Device for engine checks [default: auto = cuda when available].", default=None)
@dtype_option("Compute dtype for engine checks [default: auto = float32 on cpu, config dtype on cuda].", default=None)
@click.option("--quick/--no-quick", default=None, help="Trim slow checks (fewer prompts and steps).")
@click.option("--demo", is_flag=True, help="Check the small demo model shipped with llmdoctor.")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Baseline file from `llmdoctor baseline` to compare against (drift checks).")
@click.option("--no-config", is_flag=True, help="Ignore llmdoctor.toml / [tool.llmdoctor] settings.")
@memory_budget_option("Memory the engine may use, e.g. 4GiB, 512MiB, 8G (default: available memory minus "
                      "headroom); models that do not fit are streamed one layer at a time (docs/memory.md).")
@known_option
@click.option("--base", default=None, metavar="BASE", type=click.Path(path_type=Path),
              help="With PATH a LoRA adapter directory: its base model (default: the adapter's "
                   "base_model_name_or_path when that is a local directory or GGUF file).")
@click.option("--context", "context", type=click.IntRange(min=256), default=None, metavar="N",
              help="Read the model up to N tokens (the CTX checks; default min(declared, 4096); --quick skips "
                   "them unless N is given or --select names them). The memory plan holds the N tokens or the run "
                   "is refused; N above the declared max_position_embeddings, or no CTX check selected: exit 2; "
                   "a CTX check that cannot read: an error finding (docs/context.md).")
def check_command(path, select, ignore, fmt, output, fail_on, device, dtype, quick, demo, baseline, no_config,
                  memory_budget, known, base, context):
    """Run the checks on the model directory PATH (or a LoRA adapter on --base) and print a report."""
    from llmdoctor.run.config_file import Settings, load_settings
    from llmdoctor.run.output_guard import refuse_inside_model
    from llmdoctor.run.progress import Progress
    from llmdoctor.run.runner import run_checks, validate_model_dir
    from llmdoctor.run.selection import parse_selectors

    from llmdoctor.run.adapter_target import resolve
    target = resolve(model_path(path, demo), base)
    root = validate_model_dir(target.base)
    if output is not None:
        refuse_inside_model(output, root, "report")
        target.refuse_output(output, "report")
    if baseline is not None and not baseline.is_file():
        raise InputError(f"{baseline}: baseline file not found")
    settings = Settings() if no_config else load_settings(root)
    rank = pipeline_rank()
    report = run_checks(
        root, select=parse_selectors(select) or settings.select, ignore=parse_selectors(ignore) or settings.ignore,
        fail_on=fail_on or settings.fail_on or "error", device=device or settings.device or "auto",
        dtype=dtype or settings.dtype or "auto", quick=_first(quick, settings.quick, False),
        thresholds=settings.thresholds, baseline=baseline, progress=Progress(0, enabled=None if rank == 0 else False),
        model_label="demo" if demo else str(path) if target.adapter is None else target.label,
        memory_budget=budget_option(memory_budget, settings), plan_stream=sys.stderr if rank == 0 else None,
        adapter=target.adapter, context=context)
    if rank == 0:                  # in a torchrun pipeline, rank 0 prints the report
        emit(report, fmt, output, known)
    sys.exit(report.exit_code())


def pipeline_rank() -> int:
    """This process's rank under torchrun (starting the process group); 0 without one."""
    from reference_engine.streaming.pipeline import world
    return world()[1]


def model_path(path: str | None, demo: bool) -> Path:
    if demo and path:
        raise InputError("give either PATH or --demo, not both")
    if demo:
        if not DEMO_MODEL.is_dir():
            raise InputError(f"{DEMO_MODEL}: the demo model is not installed with this copy of llmdoctor")
        return DEMO_MODEL
    if not path:
        raise InputError("missing PATH (a model directory), or use --demo")
    return Path(path)


def _first(*values):
    return next(v for v in values if v is not None)


@cli.command("checks")
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


@cli.command("explain")
@click.argument("query", nargs=-1, required=True)
def explain_command(query):
    """Explain a check id (VOC001), list a family or category, or diagnose an error message."""
    from llmdoctor.report.explain import explain
    text, code = explain(" ".join(query))
    click.echo(text, err=code == EXIT_USAGE)
    sys.exit(code)


# the commands defined in their own modules (`llmdoctor --help` lists every command by name)
for command in (generate_command, fix_command, probe, triage, baseline_command, diff_command, report_command):
    cli.add_command(command)

if __name__ == "__main__":
    cli()
