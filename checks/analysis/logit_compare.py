"""Comparing logits of two ways to compute the same thing (the paged cache's incremental decode vs a full
recompute, a padded batch vs each sequence alone): the tolerance rule and the runs both sides need. Shared by
the far-position check (KVC003) and the reference engine's self-tests (ENG001, ENG002)."""
from __future__ import annotations

import torch

from checks.analysis.prompts import probe_inputs
from checks.registry import Skip

TOP_K = 5                 # vLLM's check_logprobs_close: when argmaxes differ, each must be in the other's top-k
FP32_RTOL = 1e-4          # max |diff| / max(1, max |logit|) in float32
LOW_RTOL = 5e-2           # the same in bfloat16/float16


def close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> dict:
    """Compare logits rows a, b [n, vocab]: {"ok", "rel_diff", "argmax_mismatch", "not_in_top_k"}."""
    a, b = a.float().cpu(), b.float().cpu()
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return {"ok": False, "rel_diff": float("nan"), "argmax_mismatch": [], "not_in_top_k": [], "nonfinite": True}
    rel = float((a - b).abs().max()) / max(1.0, float(b.abs().max()))
    ia, ib = a.argmax(-1), b.argmax(-1)
    mismatch = (ia != ib).nonzero().flatten().tolist()
    k = min(TOP_K, a.shape[-1])
    ta, tb = a.topk(k, -1).indices, b.topk(k, -1).indices
    outside = [i for i in mismatch if int(ia[i]) not in tb[i].tolist() or int(ib[i]) not in ta[i].tolist()]
    if dtype == torch.float32:
        ok = rel <= FP32_RTOL and not mismatch
    else:
        ok = rel <= LOW_RTOL and not outside
    return {"ok": ok, "rel_diff": rel, "argmax_mismatch": mismatch[:10], "not_in_top_k": outside[:10]}


def probe_sequence(ctx, length: int) -> list[int]:
    """The probes' ids back to back (repeated if needed), `length` tokens."""
    ids = [t for p in probe_inputs(ctx) for t in p.ids]
    if not ids:
        raise Skip("no probe encodes to any token")
    while len(ids) < length:
        ids = ids + ids
    return ids[:length]


def incremental(engine, ids: list[int], prefill: int, chunk: int) -> torch.Tensor:
    """Logits [len(ids) - prefill + 1, vocab] for positions prefill-1..end: prefill in chunks, then decode."""
    rows = []
    with engine.scratch() as (seq,):
        for start in range(0, prefill, chunk):
            last = engine.prefill([seq], [ids[start:min(start + chunk, prefill)]])
        rows.append(last[0])
        for t in ids[prefill:]:
            rows.append(engine.decode([seq], [t])[0])
    return torch.stack(rows)


def run_rows(engine, rows: list[list[int]], together: bool) -> torch.Tensor:
    """[2 * len(rows), vocab]: each row's prefill logits, then its logits after one decode step of its argmax."""
    with engine.scratch(len(rows)) as seqs:
        if together:
            first = engine.prefill(list(seqs), rows)
            second = engine.decode(list(seqs), first.argmax(-1).tolist())
        else:
            first = torch.cat([engine.prefill([s], [r]) for s, r in zip(seqs, rows)])
            second = torch.cat([engine.decode([s], [int(t)]) for s, t in zip(seqs, first.argmax(-1))])
    return torch.cat([first, second])
