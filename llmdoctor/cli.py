"""The `llmdoctor` command line (click).

Exit codes: 0 = nothing at or above --fail-on, 1 = a finding at or above it, 2 = usage or input error.
Bad input is reported as one line on stderr, never as a traceback."""
from __future__ import annotations

import click

from llmdoctor import __version__
from llmdoctor.commands.baseline import baseline_command
from llmdoctor.commands.check import DEMO_MODEL, check_command
from llmdoctor.commands.checks import checks_command
from llmdoctor.commands.diff import diff_command
from llmdoctor.commands.explain import explain_command
from llmdoctor.commands.fix import fix_command
from llmdoctor.commands.generate import generate_command
from llmdoctor.commands.options import EXIT_USAGE, FORMATS, InputError, budget_option, emit
from llmdoctor.commands.probe import probe
from llmdoctor.commands.report import report_command
from llmdoctor.commands.triage import triage

__all__ = ["cli", "DEMO_MODEL", "EXIT_USAGE", "FORMATS", "InputError", "budget_option", "emit"]


def input_errors() -> tuple[type[Exception], ...]:
    from checks.catalogue.inputs import ResourceError, ThresholdError
    from llmdoctor.run.config_file import ConfigFileError
    from llmdoctor.reporting.locate import KnownReportError
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


# the commands defined in their own modules (`llmdoctor --help` lists every command by name)
for command in (check_command, checks_command, explain_command, generate_command, fix_command, probe, triage,
                baseline_command, diff_command, report_command):
    cli.add_command(command)

if __name__ == "__main__":
    cli()
