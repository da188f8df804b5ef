"""The baseline file format: what `llmdoctor baseline` writes and `--baseline` (checks/runtime/drift.py) reads.

A baseline holds, per probe: its text and token ids, the top-k log-probabilities at every position, and the
greedy continuation; plus the per-layer activation statistics. JSON, versioned by `schema_version`; a file
from a newer version is refused rather than misread.
"""
from __future__ import annotations

import json
import math
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


def clean(value):
    """JSON has no NaN/Infinity: non-finite floats become null."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
