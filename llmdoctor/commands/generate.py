"""`llmdoctor generate MODEL_DIR PROMPT`: run the reference engine on one prompt, as a user reported it.

An SRE reproduces "the model talks nonsense" with the same prompt, chat template and sampling settings,
and sees the token ids and the finish reason next to the text.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import click

from llmdoctor.commands.options import device_option, dtype_option, memory_budget_option


def resolve_device_dtype(device: str, dtype: str, model_dir: Path) -> tuple[str, str]:
    """auto device = cuda when available; auto dtype = float32 on cpu, else the config's dtype (bf16 fallback)."""
    import torch

    from reference_engine.config import read_json
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        declared = read_json(model_dir / "config.json").get("torch_dtype") if device != "cpu" else None
        dtype = declared if declared in ("float32", "bfloat16", "float16") else (
            "float32" if device == "cpu" else "bfloat16")
    return device, dtype


def build_params(**values):
    from llmdoctor.commands.options import InputError
    from reference_engine.generate.sampling_params import SamplingParams
    try:
        return SamplingParams(**values)
    except ValueError as e:
        raise InputError(str(e)) from None


@click.command("generate")
@click.argument("model_dir", type=click.Path(exists=False, path_type=Path))
@click.argument("prompt")
@click.option("--chat", is_flag=True, help="Send PROMPT as a user message through the model's chat template.")
@click.option("--system", default=None, help="System message to put before PROMPT (with --chat).")
@click.option("--temperature", type=float, default=0.0, show_default=True, help="Sampling temperature; 0 = greedy.")
@click.option("--top-k", type=int, default=0, show_default=True, help="Keep the k most likely tokens; 0 = off.")
@click.option("--top-p", type=float, default=1.0, show_default=True, help="Nucleus mass to keep; 1.0 = off.")
@click.option("--min-p", type=float, default=0.0, show_default=True, help="Drop tokens below min_p * top prob.")
@click.option("--repetition-penalty", type=float, default=1.0, show_default=True, help="1.0 = off.")
@click.option("--max-new-tokens", type=int, default=128, show_default=True, help="Hard cap on generated tokens.")
@click.option("--seed", type=int, default=None, help="Seed of this request's sampler (reproducible sampling).")
@click.option("--num-beams", type=int, default=1, show_default=True, help="Beam search width; 1 = no beams.")
@click.option("--length-penalty", type=float, default=1.0, show_default=True, help="Beam length penalty.")
@click.option("--stop", multiple=True, help="Stop string (repeatable); it is cut from the output.")
@click.option("--ignore-eos", is_flag=True, help="Keep generating past EOS (up to --max-new-tokens).")
@click.option("--stream/--no-stream", default=False, help="Print text as it is generated.")
@click.option("--json", "as_json", is_flag=True, help="Print the Output (ids, text, finish reason) as JSON.")
@device_option()
@dtype_option()
@memory_budget_option()
@click.option("--base", default=None, metavar="BASE", type=click.Path(path_type=Path),
              help="With MODEL_DIR a LoRA adapter directory: its base model (default: base_model_name_or_path "
                   "when local).")
def generate_command(model_dir, prompt, chat, system, temperature, top_k, top_p, min_p, repetition_penalty,
                     max_new_tokens, seed, num_beams, length_penalty, stop, ignore_eos, stream, as_json,
                     device, dtype, memory_budget, base):
    """Generate a reply to PROMPT with the reference engine (MODEL_DIR, or a LoRA adapter on --base) and show
    why it stopped."""
    from reference_engine.engine_builder import EngineSpec, build_engine
    from llmdoctor.run.adapter_target import resolve
    from llmdoctor.commands.options import budget_option
    from llmdoctor.run.workloads import GENERATE

    target = resolve(model_dir, base)
    model_dir = target.base

    params = build_params(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                          repetition_penalty=repetition_penalty, max_new_tokens=max_new_tokens, seed=seed,
                          num_beams=num_beams, length_penalty=length_penalty, stop=list(stop),
                          ignore_eos=ignore_eos, logprobs=as_json)
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    device, dtype = resolve_device_dtype(device, dtype, model_dir)
    # one process; its KV cache holds what this request can need at most, and the plan counts exactly that
    workload = replace(GENERATE, kv_tokens=kv_tokens_bound(messages if chat else prompt, params))
    spec = EngineSpec(Path(model_dir), workload=workload, device=device, dtype=dtype,
                      memory_budget=budget_option(memory_budget, None), distributed=False, adapter=target.adapter)
    engine = build_engine(spec, generation_plan(spec)).engine
    request = messages if chat else prompt
    started = time.perf_counter()
    output = _run(engine, request, params, stream and not as_json)
    elapsed = time.perf_counter() - started
    if as_json:
        click.echo(json.dumps(_as_dict(output, elapsed), ensure_ascii=False, indent=2))
        return
    if not stream:
        click.echo(output.text)
    rate = len(output.token_ids) / elapsed if elapsed > 0 else 0.0
    click.echo(f"[finish_reason={output.finish_reason}, {len(output.token_ids)} new tokens, "
               f"{len(output.prompt_token_ids)} prompt tokens, {rate:.1f} tokens/s]", err=True)


# special tokens and a chat template's role markers: generous, the rendered template is not known before loading
TEMPLATE_SLACK_TOKENS = 512


def kv_tokens_bound(request, params) -> int:
    """An upper bound on the KV slots one request takes: every token of a byte-level or byte-fallback BPE covers
    at least one UTF-8 byte of the text, plus the template's and special tokens, plus the reply, per beam."""
    texts = [m["content"] for m in request] if isinstance(request, list) else [request]
    prompt_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return (prompt_bytes + TEMPLATE_SLACK_TOKENS + params.max_new_tokens) * max(1, params.num_beams)


def generation_plan(spec):
    """The memory plan for generation (reference_engine/budget/plan.py), printed on stderr; PlanError (exit 2)
    when not even one layer fits; None for a model the planner cannot read (warned on stderr: it then runs
    resident, without a budget, and the engine's own errors say what is wrong)."""
    from reference_engine.engine_builder import plan_or_none
    plan = plan_or_none(spec)
    if plan is None:
        return None
    from llmdoctor.run.runner import announce_plan
    announce_plan(plan, sys.stderr)
    if plan.streaming:
        from reference_engine.limits import return_freed_memory_to_os
        return_freed_memory_to_os()
    return plan


def _run(engine, request, params, stream: bool):
    from llmdoctor.commands.options import InputError
    from reference_engine.generate.loop import generate, stream as stream_text
    try:
        if not stream:
            return generate(engine, request, params)[0]
        finished = []
        for delta in stream_text(engine, request, params, on_finish=finished.append):
            sys.stdout.write(delta)
            sys.stdout.flush()
        sys.stdout.write("\n")
        return finished[0]
    except ValueError as e:  # a prompt the model cannot take (too long, ids out of vocabulary, empty)
        raise InputError(str(e)) from None


def _as_dict(output, elapsed: float) -> dict:
    return {"text": output.text, "finish_reason": output.finish_reason, "stop_reason": output.stop_reason,
            "token_ids": output.token_ids, "prompt_token_ids": output.prompt_token_ids,
            "logprobs": output.logprobs, "seconds": round(elapsed, 4),
            "tokens_per_second": round(len(output.token_ids) / elapsed, 2) if elapsed > 0 else None}
