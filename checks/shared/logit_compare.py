"""Comparing logits of two ways to compute the same thing (the paged cache's incremental decode vs a full
recompute, a padded batch vs each sequence alone): the tolerance rule and the runs both sides need. Shared by
the far-position check (KVC003) and the reference engine's self-tests (ENG001, ENG002)."""
from __future__ import annotations

import torch

from checks.shared.passes import Part
from checks.shared.prompts import probe_inputs
from reference_engine.streaming.scripted import Script, chunked_then_decoded
from checks.catalogue.registry import Skip

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


def incremental_scripts(ids: list[int], prefill: int, chunk: int, recompute: str | None = None) -> list[Script]:
    """ids[:prefill] in chunks through the paged cache, then one decode step per token; recompute="all" adds a
    full recompute of every position, "last" of the last position only."""
    script = chunked_then_decoded(ids, prefill, chunk)
    return [script] + ([Script([[list(ids)]], all_logits=recompute == "all")] if recompute else [])


def incremental(ctx, ids: list[int], prefill: int, chunk: int, recompute: str | None = None):
    """Logits [len(ids) - prefill + 1, vocab] of positions prefill-1..end: ids[:prefill] in chunks through the
    paged cache, then one decode step per token. recompute="all" also returns a full recompute's logits of the
    same positions, "last" of the last position only ([1, vocab]); a streaming engine runs both in one pass
    (the run's shared pass, when it holds them)."""
    results = scripted_results(ctx, incremental_scripts(ids, prefill, chunk, recompute))
    inc = torch.cat(results[0][-(-prefill // chunk) - 1:])
    if recompute is None:
        return inc
    full = results[1][0]
    return inc, (full[prefill - 1:] if recompute == "all" else full)


def batched_scripts(rows: list[list[int]]) -> list[Script]:
    """The rows as one padded batch (a prefill, then one decode step of each row's first id, known before the
    pass) and each row alone, the same two steps."""
    decode = [[[r[0]] for r in rows]]
    together = Script([list(map(list, rows))] + decode)
    return [together] + [Script([[list(r)], [[r[0]]]]) for r in rows]


def batched_and_alone(ctx, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """[2 * len(rows), vocab] twice: each row's prefill logits, then its logits after one decode step, with the
    rows run as one padded batch and each alone (batched_scripts: one pass when streaming)."""
    results = scripted_results(ctx, batched_scripts(rows))
    batched = torch.cat(results[0])
    single = torch.cat([torch.cat([r[step] for r in results[1:]]) for step in (0, 1)])
    return batched, single


def scripted_results(ctx, scripts: list[Script]) -> list[list[torch.Tensor]]:
    """ctx.engine.run_scripts(scripts), or what the run's shared pass computed for the same scripts."""
    ctx.prepare_engine_runs()
    done = ctx.state.get("scripted", {}).pop(script_key(scripts), None)
    return done if done is not None else ctx.engine.run_scripts(scripts)


def scripted_part(scripts: list[Script]) -> Part:
    """These scripts as a shared run's part: their results filed where scripted_results looks."""
    def store(ctx, _, results):
        ctx.state.setdefault("scripted", {})[script_key(scripts)] = results
    return Part([], scripts, store)


def script_key(scripts: list[Script]) -> tuple:
    """The steps of these scripts as a key: the shared pass files its results under it."""
    return tuple((tuple(tuple(tuple(int(t) for t in seq) for seq in step) for step in s.steps), s.all_logits)
                 for s in scripts)
