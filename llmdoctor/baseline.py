"""Golden baselines for the CI gate: `llmdoctor baseline MODEL -o golden.json` records what the model does on the
built-in probes; `llmdoctor check MODEL --baseline golden.json` (checks/drift.py) reports drift against it.

A baseline holds, per probe: its text and token ids, the top-k log-probabilities at every position, and the
greedy continuation; plus the per-layer activation statistics. JSON, versioned by `schema_version`; a file
from a newer version is refused rather than misread. Never written into the model directory.
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import torch

SCHEMA_VERSION = 1
KIND = "llmdoctor-baseline"
DEFAULT_TOP_K = 20


class BaselineError(ValueError):
    """A baseline cannot be written or read; the message names the file and the problem."""


def top_k_rows(logits: torch.Tensor, k: int) -> list[dict]:
    """Per position {"ids": [...], "logprobs": [...]} of the k most likely tokens (log-softmax in float64)."""
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    values, ids = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1)
    return [{"ids": i.tolist(), "logprobs": [round(float(v), 9) if math.isfinite(v) else None for v in row.tolist()]}
            for i, row in zip(ids, values)]


def record(model_dir: str | Path, *, device: str = "auto", dtype: str = "auto", quick: bool = False,
           top_k: int = DEFAULT_TOP_K) -> dict:
    """Run the probes on the model and return the baseline document."""
    from checks._probe_runs import eos_ids, forward_runs, greedy_traces
    from checks._prompts import new_tokens
    from checks.activations import activation_table
    from checks.context import CheckContext
    from llmdoctor import __version__
    from llmdoctor.fingerprint import fingerprint

    if top_k < 1:
        raise BaselineError(f"--top-k must be at least 1, found {top_k}")
    ctx = CheckContext(model_dir, device=device, dtype=dtype, quick=quick)
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
            "model": str(model_dir), "fingerprint": fingerprint(Path(model_dir)), "device": ctx.device,
            "dtype": ctx.dtype, "quick": quick, "top_k": top_k, "new_tokens": new_tokens(quick),
            "probes": probes, "activations": _clean(activation_table(runs))}


def _clean(value):
    """JSON has no NaN/Infinity: non-finite floats become null."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
        return True
    except ValueError:
        return False


def save(document: dict, output: str | Path, model_dir: str | Path) -> Path:
    """Write the baseline (whole, via a temporary file); refuses any path inside the model directory."""
    output = Path(output)
    if inside(output, Path(model_dir)):
        raise BaselineError(f"{output}: refusing to write inside the model directory {model_dir}")
    text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError as e:
        raise BaselineError(f"{output}: cannot write baseline: {e.strerror or e}") from None
    return output


def load(path: str | Path) -> dict:
    """Read and validate a baseline file; BaselineError with a one-line reason otherwise."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise BaselineError(f"{path}: cannot read baseline: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BaselineError(f"{path}: not a baseline file (invalid JSON: {e})") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise BaselineError(f"{path}: not an llmdoctor baseline (written by `llmdoctor baseline`)")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BaselineError(f"{path}: baseline schema_version {version!r}; this llmdoctor reads {SCHEMA_VERSION}")
    probes = document.get("probes")
    if not isinstance(probes, list) or not probes or not all(_valid_probe(p) for p in probes):
        raise BaselineError(f"{path}: baseline has no valid probes")
    return document


def _valid_probe(p) -> bool:
    return (isinstance(p, dict) and isinstance(p.get("ids"), list) and isinstance(p.get("top_k"), list)
            and isinstance(p.get("text"), str) and len(p["top_k"]) == len(p["ids"])
            and all(isinstance(i, int) for i in p["ids"]) and isinstance(p.get("greedy", []), list))
