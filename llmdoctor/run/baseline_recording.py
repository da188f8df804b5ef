"""Golden baselines for the CI gate: `llmdoctor baseline MODEL -o golden.json` records what the model does on the
built-in probes; `llmdoctor check MODEL --baseline golden.json` (checks/runtime/drift.py) reports drift against it.

A baseline holds, per probe: its text and token ids, the top-k log-probabilities at every position, and the
greedy continuation; plus the per-layer activation statistics. JSON, versioned by `schema_version`; a file
from a newer version is refused rather than misread. Never written into the model directory.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from checks.shared.baseline_file import (DEFAULT_TOP_K, KIND, SCHEMA_VERSION, BaselineError, clean,
                                          top_k_rows)
from llmdoctor.run.output_guard import refuse_inside_model


def record(model_dir: str | Path, *, device: str = "auto", dtype: str = "auto", quick: bool = False,
           top_k: int = DEFAULT_TOP_K, memory_budget: int | None = None, plan_stream=None,
           adapter: str | Path | None = None) -> dict:
    """Run the probes on the model and return the baseline document (the engine planned against
    memory_budget like a check run, reference_engine/budget/plan.py; the plan printed to plan_stream)."""
    from checks.shared.probe_runs import eos_ids, forward_runs, greedy_traces
    from checks.shared.prompts import new_tokens
    from checks.runtime.activations import activation_table
    from checks.catalogue.inputs import CheckInputs
    from llmdoctor import __version__
    from llmdoctor.run.fingerprint import fingerprint

    if top_k < 1:
        raise BaselineError(f"--top-k must be at least 1, found {top_k}")
    from llmdoctor.run.workloads import BASELINE
    ctx = CheckInputs(model_dir, device=device, dtype=dtype, quick=quick, memory_budget=memory_budget,
                       workload=BASELINE, adapter_dir=adapter)
    plan = ctx._plan_or_none()          # PlanError (exit 2) before anything is loaded
    from llmdoctor.run.runner import announce_plan
    announce_plan(plan, plan_stream)
    if plan is None and ctx.plan_fallback is not None:
        from reference_engine.engine_builder import fallback_warning
        print(fallback_warning(ctx.plan_fallback), file=plan_stream or sys.stderr, flush=True)
    runs = forward_runs(ctx)
    traces = greedy_traces(ctx.engine, [r.probe.ids for r in runs], new_tokens(quick), eos_ids(ctx.engine))
    probes = []
    for run, trace in zip(runs, traces):
        probes.append({"label": run.probe.label, "text": run.probe.text, "chat": run.probe.chat,
                       "ids": list(run.probe.ids), "top_k": top_k_rows(run.logits, top_k),
                       "greedy": trace.tokens, "greedy_finish": trace.finish,
                       "greedy_text": ctx.tokenizer.decode(trace.tokens, skip_special_tokens=True)})
    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "tool_version": __version__,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "model": str(model_dir), **({"adapter": str(adapter)} if adapter else {}),
            "fingerprint": fingerprint(Path(model_dir)), "device": ctx.device,
            "dtype": ctx.dtype, "quick": quick, "top_k": top_k, "new_tokens": new_tokens(quick),
            "probes": probes, "activations": clean(activation_table(runs))}


def save(document: dict, output: str | Path, model_dir: str | Path) -> Path:
    """Write the baseline (whole, via a temporary file); refuses any path inside the model directory."""
    output = Path(output)
    refuse_inside_model(output, model_dir, "baseline")
    if output.is_dir():
        raise BaselineError(f"{output}: is a directory; give a file name for the baseline")
    text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError as e:
        raise BaselineError(f"{output}: cannot write baseline: {e.strerror or e}") from None
    return output


