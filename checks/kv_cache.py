"""KV-cache correctness: incremental decode through the paged cache vs a full recompute, a left-padded batch vs
each sequence alone, and logits near max_position_embeddings (where an ignored rope_scaling shows)."""
from __future__ import annotations

import torch

from checks.analysis.prompts import probe_inputs, probe_texts
from checks.registry import Problem, Skip, check

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


@check("KVC001", category="kv_cache", severity="error", needs=("engine", "tokenizer"),
       hint="A bug in the cache write/read path (slot mapping, block table, RoPE position of cached keys).")
def incremental_vs_full(ctx):
    """Chunked prefill + token-by-token decode through the paged cache gives the logits of a full recompute.

    The probe ids (crossing several KV blocks) are run once as one prefill, and again as a chunked
    prefill followed by one decode step per token through the paged cache. In float32 the logits must
    agree to 1e-4 relative and the argmax must match at every position; in bfloat16/float16 the argmaxes
    may differ only within each other's top-5 and the relative difference must stay under 5e-2 (the
    check vLLM's tests use, check_logprobs_close). Modelled on transformers#25420 and #46190
    (prefill+decode diverging from a full forward).
    """
    engine = ctx.engine
    block = engine.cache.block_size
    n = min(2 * block + 8 if ctx.quick else 4 * block + 8, engine.config.max_position_embeddings)
    ids = probe_sequence(ctx, n)
    decode = min(8 if ctx.quick else 2 * block, n - 2)
    prefill = n - decode
    full = engine.logits(ids)[prefill - 1:]
    inc = incremental(engine, ids, prefill, max(1, block - 3))   # chunks that straddle block boundaries
    result = close(inc, full, engine.dtype)
    if not result["ok"]:
        yield Problem(f"incremental decode disagrees with a full recompute (relative diff {result['rel_diff']:.3g}, "
                      f"argmax differs at {len(result['argmax_mismatch'])} of {len(full)} positions)",
                      evidence={**result, "tokens": n, "prefill": prefill, "decode_steps": decode,
                                "dtype": str(engine.dtype), "block_size": block})


@check("KVC002", category="kv_cache", severity="error", needs=("engine", "tokenizer"),
       hint="Check position ids (cumsum(mask) - 1 per row) and that the batch's attention never crosses rows.")
def batch_vs_alone(ctx):
    """A left-padded batch of probes gives each sequence the logits it gets alone (prefill and one decode).

    The probes are padded into one batch by the tokenizer (left padding); each row's real tokens (by its
    attention mask) must be that prompt's ids, with position ids 0..n-1 over them. The rows then run as one
    batched prefill and one batched decode step, and each sequence alone; logits must agree (float32:
    1e-4 relative, same argmax; low precision: top-5 containment). Catches the position_ids/padding bugs
    users keep reporting (unsloth#3699, transformers PR#48161) and attention leaking between sequences.
    """
    engine, tok = ctx.engine, ctx.tokenizer
    texts = list(probe_texts(ctx.quick))
    batch = tok(texts, padding=True, padding_side="left", return_tensors=None)
    rows, problems = [], []
    for i, (ids, mask, pos) in enumerate(zip(batch["input_ids"], batch["attention_mask"], batch["position_ids"])):
        real = [t for t, m in zip(ids, mask) if m]
        real_pos = [p for p, m in zip(pos, mask) if m]
        if real != tok.encode(texts[i]) or real_pos != list(range(len(real))):
            problems.append({"row": i + 1, "real_ids": real[:20], "positions": real_pos[:20]})
        rows.append(real)
    if problems:
        yield Problem(f"padded batch: {len(problems)} rows lose their ids or positions under the attention mask",
                      evidence={"rows": problems})
        return
    batched, alone = _run_rows(engine, rows, together=True), _run_rows(engine, rows, together=False)
    result = close(batched, alone, engine.dtype)
    if not result["ok"]:
        yield Problem(f"batched logits differ from each sequence alone (relative diff {result['rel_diff']:.3g})",
                      evidence={**result, "rows": len(rows), "lengths": [len(r) for r in rows]})


def _run_rows(engine, rows: list[list[int]], together: bool) -> torch.Tensor:
    """[2 * len(rows), vocab]: each row's prefill logits, then its logits after one decode step of its argmax."""
    with engine.scratch(len(rows)) as seqs:
        if together:
            first = engine.prefill(list(seqs), rows)
            second = engine.decode(list(seqs), first.argmax(-1).tolist())
        else:
            first = torch.cat([engine.prefill([s], [r]) for s, r in zip(seqs, rows)])
            second = torch.cat([engine.decode([s], [int(t)]) for s, t in zip(seqs, first.argmax(-1))])
    return torch.cat([first, second])


# ---- far positions -------------------------------------------------------------------------------------

def trained_context(raw: dict) -> int | None:
    """The context the weights were trained on, when the config says so outside rope_scaling (Phi-3 style)."""
    for source in (raw, raw.get("rope_parameters") or {}):
        value = source.get("original_max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return None


def far_budget(ctx) -> int:
    """Longest sequence the far-position check runs: the whole context on a GPU, less on a CPU."""
    if ctx.device != "cpu":
        return ctx.threshold("KVC003", "max_tokens_gpu", 32768)
    return ctx.threshold("KVC003", "max_tokens_cpu", 128 if ctx.quick else 2048)


@check("KVC003", category="kv_cache", severity="warning", needs=("engine", "tokenizer"),
       hint="Restore rope_scaling from the original config.json (and keep original_max_position_embeddings).")
def far_positions(ctx):
    """Positions near max_position_embeddings: rope_scaling present when the config needs it; logits sane.

    Position 0 cannot show a RoPE problem: rotations there are the identity. Two parts. (1) The config
    says the weights were trained on `original_max_position_embeddings` tokens yet allows more
    (max_position_embeddings) with no rope_scaling: positions past the trained context run unscaled and
    degenerate (unsloth PR#6197: rope_scaling dropped -> gibberish past ~29K; mlx-vlm PR#1710: exact at
    position 0, cosine 0.757 at 8192 — short tests miss it). (2) A sequence reaching the end of the
    context (capped: KVC003.max_tokens_cpu, 128 with --quick and 2048 otherwise on a CPU;
    KVC003.max_tokens_gpu, 32768, on a GPU; and by the engine's KV-cache size) is decoded
    incrementally (its last 4 tokens decoded one by one) and the final position compared with a float32
    full recompute: logits must be finite and agree as in KVC001, and the RoPE table must cover every position.
    """
    engine, raw = ctx.engine, ctx.raw_config
    max_pos = engine.config.max_position_embeddings
    trained = trained_context(raw)
    scaling = engine.rope.rope_type != "default" or bool(raw.get("rope_scaling"))
    if trained and trained < max_pos and not scaling:
        yield Problem(f"config allows {max_pos} positions but the weights were trained on {trained} "
                      "(original_max_position_embeddings) and no rope_scaling is set: positions past "
                      f"{trained} run unscaled", evidence={"max_position_embeddings": max_pos,
                                                           "original_max_position_embeddings": trained,
                                                           "rope_scaling": raw.get("rope_scaling")})
    room = (engine.cache.allocator.num_free - 1) * engine.cache.block_size   # what the engine's cache can hold
    n = min(max_pos, far_budget(ctx), room)
    ids = probe_sequence(ctx, n)
    tail = min(4, n - 1)
    problems = engine.validate(positions=[n - 1])
    inc = incremental(engine, ids, n - tail, 256)
    full = last_logits(_float32(ctx), ids)          # only the last row: [n, vocab] logits would not fit a GPU
    result = close(inc[-1:], full, engine.dtype)
    if not torch.isfinite(inc).all():
        result["ok"] = False
    if problems or not result["ok"]:
        yield Problem(f"logits at position {n - 1} (of {max_pos}) after {tail} decode steps disagree with a "
                      f"float32 full recompute (relative diff {result['rel_diff']:.3g})"
                      + (f"; {problems[0]}" if problems else ""),
                      severity="error", evidence={**result, "tokens": n, "max_position_embeddings": max_pos,
                                                  "core_problems": problems})


def last_logits(engine, ids: list[int]) -> torch.Tensor:
    """[1, vocab] logits of the last position of one fresh prefill of ids."""
    with engine.scratch() as (seq,):
        return engine.prefill([seq], [ids])


def _float32(ctx):
    if ctx.engine.dtype == torch.float32:
        return ctx.engine
    from reference_engine.engine import Engine
    return Engine.from_pretrained(ctx.model_dir, device=ctx.device, dtype="float32",
                                  num_blocks=far_budget(ctx) // 16 + 2)
