"""`llmdoctor baseline MODEL_DIR -o golden.json`: record a golden baseline for `llmdoctor check --baseline`."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from llmdoctor.commands.options import device_option, dtype_option, memory_budget_option, output_option


@click.command("baseline")
@click.argument("model_dir", type=click.Path(file_okay=False, dir_okay=True, path_type=Path))
@output_option("Baseline file to write (JSON); never inside the model directory.", required=True)
@device_option("Device to run the probes on.")
@dtype_option()
@click.option("--quick/--no-quick", default=False, help="Short probe set and few greedy tokens.")
@click.option("--top-k", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Log-probabilities recorded per position.")
@memory_budget_option()
@click.option("--base", default=None, metavar="BASE", type=click.Path(path_type=Path),
              help="With MODEL_DIR a LoRA adapter directory: its base model (default: base_model_name_or_path "
                   "when local).")
def baseline_command(model_dir, output, device, dtype, quick, top_k, memory_budget, base):
    """Record token ids, top-k logits, greedy continuations and activation stats of MODEL_DIR's probes
    (MODEL_DIR may be a LoRA adapter, run on --base)."""
    from llmdoctor.run.adapter_target import resolve
    from llmdoctor.run.baseline_recording import BaselineError, record, save
    from llmdoctor.commands.options import InputError, budget_option
    from llmdoctor.run.output_guard import refuse_inside_model
    from llmdoctor.run.runner import validate_device, validate_model_dir

    target = resolve(model_dir, base)
    root = validate_model_dir(target.base)
    validate_device(device)
    try:
        refuse_inside_model(output, root, "baseline")
        target.refuse_output(output, "baseline")
        document = record(root, device=device, dtype=dtype, quick=quick, top_k=top_k,
                          memory_budget=budget_option(memory_budget, None), plan_stream=sys.stderr,
                          adapter=target.adapter)
        save(document, output, root)
    except BaselineError as e:
        raise InputError(str(e)) from None
    probes = len(document["probes"])
    click.echo(f"llmdoctor: baseline of {probes} probes ({document['device']}, {document['dtype']}) "
               f"written to {output}", err=True)
