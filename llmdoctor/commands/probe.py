"""`llmdoctor probe kv`, `llmdoctor probe bandwidth`, and the group `llmdoctor probe` that also holds `probe endpoint`
(commands/endpoint.py) and `probe load` (commands/load.py); registered by llmdoctor.cli."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from llmdoctor.commands.endpoint import probe_endpoint
from llmdoctor.commands.load import probe_load
from llmdoctor.commands.options import report_options


def _size(ctx, param, value):
    if value is None:
        return None
    from reference_engine.budget.plan import parse_size
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _block_sizes(ctx, param, value):
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, found {value!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise click.BadParameter("block sizes must be integers >= 1")
    return sizes


def finish(recorder, fmt: str, output: Path | None, fail_on: str, known: Path | None = None) -> None:
    from llmdoctor.commands.options import emit
    report = recorder.report(fail_on=fail_on)
    emit(report, fmt, output, known)
    sys.exit(report.exit_code())


@click.group("probe")
def probe():
    """Measure the runtime: KV-cache fragmentation, memory bandwidth, a live server vs the reference."""


@probe.command("kv")
@click.option("--trace", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Replay a JSONL trace (arrival_s, prompt_tokens, output_tokens per line) "
                   "instead of a synthetic load.")
@click.option("--requests", type=click.IntRange(1), default=10000, show_default=True, help="Synthetic: requests.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=20.0, show_default=True,
              help="Synthetic: Poisson arrival rate, requests/s.")
@click.option("--prompt-median", type=click.FloatRange(min=1), default=256.0, show_default=True,
              help="Synthetic: median prompt tokens (lognormal).")
@click.option("--prompt-sigma", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Synthetic: lognormal sigma of prompt tokens.")
@click.option("--output-median", type=click.FloatRange(min=1), default=128.0, show_default=True,
              help="Synthetic: median output tokens (lognormal).")
@click.option("--output-sigma", type=click.FloatRange(min=0), default=0.8, show_default=True,
              help="Synthetic: lognormal sigma of output tokens.")
@click.option("--seed", type=int, default=0, show_default=True, help="Synthetic: random seed.")
@click.option("--save-trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the workload as a JSONL trace (to replay or edit).")
@click.option("--block-sizes", default="1,16,256", show_default=True, callback=_block_sizes,
              help="Paged block sizes to compare (tokens per block).")
@click.option("--pool-tokens", type=click.IntRange(1), default=None,
              help="KV pool size in tokens [default: 262144, or --memory-budget / the model's KV bytes per token].")
@click.option("--with-model", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Size the pool from this model's KV bytes per token (config.json only; weights are not read).")
@click.option("--memory-budget", callback=_size, default=None,
              help="KV memory to simulate, e.g. 16GiB (4G = 4 GiB, as in every command): the pool is this over "
                   "the model's KV bytes per token, so it needs --with-model [default: 4GiB].")
@click.option("--kv-dtype", type=click.Choice(("float32", "bfloat16", "float16")), default=None,
              help="KV cache dtype with --with-model [default: the config's torch_dtype, else bfloat16].")
@click.option("--max-len", type=click.IntRange(2), default=None,
              help="Context length of the contiguous reservation baseline [default: the model's, else 4096].")
@click.option("--tick-tokens", type=click.IntRange(1), default=16, show_default=True,
              help="Decode steps per scheduler tick (time resolution of the simulation).")
@click.option("--step-ms", type=click.FloatRange(min=0, min_open=True), default=25.0, show_default=True,
              help="Milliseconds per decode step.")
@click.option("--max-running", type=click.IntRange(1), default=256, show_default=True,
              help="Most sequences running at once (batch limit).")
@report_options
def probe_kv(trace, requests, rate, prompt_median, prompt_sigma, output_median, output_sigma, seed, save_trace,
             block_sizes, pool_tokens, with_model, memory_budget, kv_dtype, max_len, tick_tokens, step_ms,
             max_running, fmt, output, fail_on, known):
    """Drive the engine's paged KV allocator with a workload and report fragmentation per block size."""
    from probes.kv import DEFAULT_KV_BUDGET, DEFAULT_POOL_TOKENS, ModelKv, kv_findings, run_kv_probe
    from probes.kv_workload import SyntheticSpec, load_trace, synthetic, write_trace
    from llmdoctor.run.output_guard import refuse_inside_model
    from llmdoctor.reporting.probe_report import ProbeRecorder
    if memory_budget is not None and with_model is None:
        # without a model a token has no size, so a byte budget cannot size the pool; refusing beats ignoring it
        raise click.UsageError("--memory-budget sizes the KV pool from a model's bytes per token: add "
                               "--with-model MODEL_DIR, or give the pool in tokens with --pool-tokens")
    refuse_inside_model(output, with_model, "report")
    refuse_inside_model(save_trace, with_model, "trace")
    started = time.perf_counter()
    recorder = ProbeRecorder(str(with_model) if with_model else "(no model)")
    kv = ModelKv.from_dir(with_model, kv_dtype) if with_model else None
    max_len = max_len or (kv.max_position_embeddings if kv else 4096)
    if trace:
        workload, label = load_trace(trace), f"trace: {trace}"
    else:
        spec = SyntheticSpec(requests, rate, prompt_median, prompt_sigma, output_median, output_sigma, max_len, seed)
        workload, label = synthetic(spec), spec.describe()
    if save_trace:
        write_trace(workload, save_trace)
    if pool_tokens is None:
        pool_tokens = (memory_budget or DEFAULT_KV_BUDGET) // max(kv.bytes_per_token, 1) if kv else DEFAULT_POOL_TOKENS
    result = run_kv_probe(workload, label, pool_tokens=max(pool_tokens, 1), max_len=max_len, block_sizes=block_sizes,
                          bytes_per_token=kv.bytes_per_token if kv else None, tick_tokens=tick_tokens,
                          step_s=step_ms / 1e3, max_running=max_running,
                          state_bytes_per_sequence=kv.state_bytes_per_sequence if kv else 0)
    recorder.add(kv_findings(result), time.perf_counter() - started)
    click.echo(f"llmdoctor: probe kv: {len(workload)} requests x {len(result.runs)} allocations simulated in "
               f"{time.perf_counter() - started:.1f} s", err=True)
    finish(recorder, fmt, output, fail_on, known)


@probe.command("bandwidth")
@click.option("--device", default="auto", show_default=True,
              help="auto (cuda when available), cpu, cuda or cuda:N.")
@click.option("--size", "size_bytes", callback=_size, default=None,
              help="Bytes per array, e.g. 512MiB [default: 128MiB on cpu, 1GiB on cuda].")
@click.option("--runs", type=click.IntRange(1), default=5, show_default=True, help="Timed runs per kernel (median).")
@click.option("--model", "model_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Also run the engine's batch-1 decode on this model: the decode roofline.")
@click.option("--dtype", type=click.Choice(("float32", "bfloat16", "float16")), default=None,
              help="Engine dtype for the decode roofline [default: float32 on cpu, bfloat16 on cuda].")
@report_options
def probe_bandwidth(device, size_bytes, runs, model_dir, dtype, fmt, output, fail_on, known):
    """Measure achieved memory bandwidth vs the NVML peak (or host memory without a GPU)."""
    import torch

    from llmdoctor.run.output_guard import refuse_inside_model
    from llmdoctor.reporting.probe_report import ProbeRecorder
    from llmdoctor.incident_bundle.parts import run_bandwidth_part, run_roofline_part
    refuse_inside_model(output, model_dir, "report")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise click.BadParameter(f"no CUDA device available to torch {torch.__version__} "
                                 f"(CUDA build {torch.version.cuda or 'none'}); use --device cpu or auto",
                                 param_hint="--device")
    recorder = ProbeRecorder(str(model_dir) if model_dir else "(no model)")
    result = run_bandwidth_part(recorder, device, size_bytes, runs)
    if result is not None:
        recorder.device = result.device
        skipped = next((f for f in recorder.findings if f.check == "GPU101" and f.message.startswith("skipped")), None)
        if skipped:
            click.echo(f"llmdoctor: {skipped.message}; measured {result.device_name} host memory instead", err=True)
        if model_dir is not None:
            dev = "cuda" if result.device.startswith("cuda") else "cpu"
            run_roofline_part(recorder, model_dir, result.best_bytes_per_s, dev,
                              dtype or ("bfloat16" if dev == "cuda" else "float32"))
    finish(recorder, fmt, output, fail_on, known)


probe.add_command(probe_endpoint)
probe.add_command(probe_load)
