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
@click.option("--model", "model", type=click.Path(exists=True, path_type=Path), default=None,
              help="Two servers: the model directory (or GGUF) both should serve; its tokenizer counts the prompts "
                   "(DIF072).")
@click.option("--prompts", type=click.IntRange(1, 32), default=None,
              help="Two servers: probe prompts sent to both [default: 4, 2 with --quick].")
@click.option("--max-tokens", type=click.IntRange(1, 512), default=None,
              help="Two servers: greedy tokens per answer [default: 24, 12 with --quick].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=None,
              help="Two servers: seconds one request may take (per 1024 tokens it sends or asks for; each server's "
                   "run 10x this) [default: 60].")
@click.option("--api-key-env", metavar="VAR", default=None,
              help="Two servers: environment variable holding the API key both are sent (never written to the "
                   "report).")
@click.option("--served-name", "served_names", multiple=True, metavar="NAME",
              help="Two servers: the model name put in requests, once for both or twice (URL_A's, then URL_B's) "
                   "[default: each server's first /v1/models entry].")
@click.pass_context
def diff_command(click_ctx, ref, cand, text_file, ctx_len, chunks, select, ignore, fmt, output, fail_on, device,
                 dtype, quick, memory_budget, known, base, model, prompts, max_tokens, timeout_s, api_key_env,
                 served_names):
    """Compare the candidate CAND with the reference REF (HF directories or GGUF files; CAND may be a baseline
    JSON from `llmdoctor baseline`): config, tokenizer, weights, logit statistics, the first layer where they
    part ways, and greedy generations.

    REF and CAND may instead both be URLs of live OpenAI-compatible servers (http://host:port or .../v1) that
    should serve the same model: greedy answers with the first differing token and both margins, top-logprob
    KL by position, prompt token counts, tool-call and structured-output parity (DIF070-DIF073)."""
    from llmdoctor.run.server_diff import is_url
    given = {name for name in click_ctx.params
             if click_ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    if is_url(ref) or is_url(cand):
        if not (is_url(ref) and is_url(cand)):
            url, other = (ref, cand) if is_url(ref) else (cand, ref)
            raise InputError(f"diff compares two models or two servers: {url} is a URL, {other} is not; to compare "
                             f"a server with a model run `llmdoctor probe endpoint {url} --model {other}`")
        _refuse(given & MODEL_ONLY.keys(), "models")
        if len(served_names) > 2:
            raise InputError(f"--served-name given {len(served_names)} times: once for both servers, or twice")
        names = (served_names * 2)[:2] if served_names else (None, None)
        _diff_servers(ref, cand, model, prompts, max_tokens, timeout_s, api_key_env, names, select, ignore, fmt,
                      output, fail_on, known, quick)
    _refuse(given & SERVER_ONLY.keys(), "servers")
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


MODEL_ONLY = {"text_file": "--text", "ctx_len": "--ctx", "chunks": "--chunks", "device": "--device",
              "dtype": "--dtype", "memory_budget": "--memory-budget", "base": "--base"}
SERVER_ONLY = {"model": "--model", "prompts": "--prompts", "max_tokens": "--max-tokens", "timeout_s": "--timeout",
               "api_key_env": "--api-key-env", "served_names": "--served-name"}


def _refuse(names, read_for: str) -> None:
    """Options that do nothing for what is compared are refused in one line, never silently ignored."""
    if names:
        flags = sorted((MODEL_ONLY | SERVER_ONLY)[n] for n in names)
        other = "servers" if read_for == "models" else "models"
        raise InputError(f"{', '.join(flags)}: read only when diff compares two {read_for}, and these are two {other}")


def _diff_servers(url_a, url_b, model, prompts, max_tokens, timeout_s, api_key_env, served_names, select, ignore,
                  fmt, output, fail_on, known, quick):
    from checks.diff.servers.inputs import ServerOptions
    from checks.diff.servers.requests import DEFAULT_MAX_TOKENS, DEFAULT_PROMPTS, QUICK_MAX_TOKENS, QUICK_PROMPTS
    from llmdoctor.run.output_guard import refuse_inside_model
    from llmdoctor.run.selection import parse_selectors
    from llmdoctor.run.server_diff import ServerDiffError, ServerDiffOptions, run_server_diff

    tokenizer = None
    if model is not None:
        from reference_engine.tokenizer import Tokenizer
        refuse_inside_model(output, model if model.is_dir() else model.parent, "report")
        tokenizer = Tokenizer.from_pretrained(model)     # ModelDirError: one line, exit 2 (the CLI's handler)
    requests = ServerOptions(prompts or (QUICK_PROMPTS if quick else DEFAULT_PROMPTS),
                             max_tokens or (QUICK_MAX_TOKENS if quick else DEFAULT_MAX_TOKENS))
    options = ServerDiffOptions(requests, timeout_s or 60.0, api_key_env, tuple(served_names))
    try:
        report = run_server_diff(url_a, url_b, options, tokenizer=tokenizer, select=parse_selectors(select) or None,
                                 ignore=parse_selectors(ignore), fail_on=fail_on)
    except ServerDiffError as e:
        raise InputError(str(e)) from None
    emit(report, fmt, output, known)
    sys.exit(report.exit_code())
