"""`llmdoctor diff REF CAND`: where two checkpoints part ways, from config to layer to token (the DIF family)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from llmdoctor.commands.options import (InputError, budget_option, device_option, dtype_option, emit, fail_on_option,
                                   format_option, known_option, memory_budget_option, output_option)


@click.command("diff")
@click.argument("ref", type=click.Path(path_type=str))
@click.argument("cand", type=click.Path(path_type=str))
@click.option("--text", "text_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Text for the logit statistics, the layer trace and the tokenizer corpus "
                   "[default: a built-in multilingual corpus].")
@click.option("--ctx", "ctx_len", type=click.IntRange(4, None), default=None,
              help="Window length for the logit statistics (llama-perplexity's -c) "
                   "[default: 512, capped by the models].")
@click.option("--chunks", type=click.IntRange(1, None), default=None,
              help="Score at most this many windows (llama-perplexity's --chunks).")
@click.option("--select", multiple=True, metavar="IDS", help="Run only these DIF checks (ids or prefixes).")
@click.option("--ignore", multiple=True, metavar="IDS", help="Skip these DIF checks.")
@format_option()
@output_option("Write the report to this file instead of stdout (never inside either model's directory).")
@fail_on_option()
@device_option("Device both models run on (auto = cuda when available, else cpu).")
@dtype_option("Compute dtype of both models (auto = float32 on cpu).")
@click.option("--quick", is_flag=True, help="Fewer windows, tokens and probes.")
@memory_budget_option("Memory both engines may use together, e.g. 8GiB (each side gets half; larger models stream).")
@known_option
@click.option("--base", default=None, metavar="BASE", type=click.Path(path_type=Path),
              help="Base model of the side that is a LoRA adapter directory (default: the adapter's "
                   "base_model_name_or_path when local).")
def diff_command(ref, cand, text_file, ctx_len, chunks, select, ignore, fmt, output, fail_on, device, dtype, quick,
                 memory_budget, known, base):
    """Compare the candidate CAND with the reference REF (HF directories or GGUF files; CAND may be a baseline
    JSON from `llmdoctor baseline`): config, tokenizer, weights, logit statistics, the first layer where they
    part ways, and greedy generations."""
    from llmdoctor.run.diff_runner import run_diff
    from llmdoctor.run.output_guard import refuse_inside_model
    from llmdoctor.run.progress import Progress
    from llmdoctor.run.selection import parse_selectors

    if output is not None:
        for path in (ref, cand):          # a directory, or the GGUF/baseline file itself
            refuse_inside_model(output, Path(path), "report")
        from llmdoctor.run.diff_runner import adapter_sides
        for target in adapter_sides(ref, cand, base):   # and the base an adapter side runs on
            target.refuse_output(output, "report")
    text = None
    if text_file is not None:
        try:
            text = text_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{text_file}: cannot read --text: {getattr(e, 'strerror', None) or e}") from None
    report = run_diff(ref, cand, text=text, select=parse_selectors(select) or None,
                      ignore=parse_selectors(ignore), fail_on=fail_on, device=device, dtype=dtype, quick=quick,
                      memory_budget=budget_option(memory_budget, None), ctx_len=ctx_len, chunks=chunks,
                      progress=Progress(0), base=base)
    emit(report, fmt, output, known)
    sys.exit(report.exit_code())
