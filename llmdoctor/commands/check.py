"""`llmdoctor check PATH`: run the checks on a model directory, a GGUF file or a LoRA adapter and print a report."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from llmdoctor.commands.options import (InputError, budget_option, device_option, dtype_option, emit, fail_on_option,
                                        format_option, known_option, memory_budget_option, output_option)

DEMO_MODEL = Path(__file__).parents[1] / "demo_model"


@click.command("check")
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
