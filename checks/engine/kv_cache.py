"""KV-cache behaviour this model's config decides: logits near max_position_embeddings (where an ignored or missing
rope_scaling shows). Whether the paged cache itself computes what a full recompute does is the reference engine's
self-test (ENG001/ENG002 in checks/engine/selftest.py): no model file can make those fail."""
from __future__ import annotations

import torch

from checks.shared.logit_compare import close, incremental, incremental_scripts, probe_sequence, scripted_part
from checks.catalogue.registry import Problem, SharedRun, check

# ---- far positions -------------------------------------------------------------------------------------
# tokens the far-position check runs (thresholds KVC003.max_tokens_gpu / max_tokens_cpu); the memory plan's
# check workloads (llmdoctor/run/workloads.py) count their KV cache from these
FAR_TOKENS_GPU, FAR_TOKENS_CPU, FAR_TOKENS_QUICK = 32768, 2048, 128
FAR_CHUNK = 256          # prefill chunk of the incremental side


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
        return ctx.threshold("KVC003", "max_tokens_gpu", FAR_TOKENS_GPU)
    return ctx.threshold("KVC003", "max_tokens_cpu", FAR_TOKENS_QUICK if ctx.quick else FAR_TOKENS_CPU)


FAR = SharedRun("far positions", lambda ctx: far_part(ctx))


@check("KVC003", category="kv_cache", severity="error", needs=("engine", "tokenizer"),
       hint="Restore rope_scaling from the original config.json (and keep original_max_position_embeddings).",
       shares=(FAR,))
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
    full recompute: logits must be finite and agree as in ENG001, and the RoPE table must cover every position.
    """
    engine, raw = ctx.engine, ctx.raw_config
    max_pos = engine.config.max_position_embeddings
    trained = trained_context(raw)
    scaling = engine.rope.rope_type != "default" or bool(raw.get("rope_scaling"))
    if trained and trained < max_pos and not scaling:
        yield Problem(f"config allows {max_pos} positions but the weights were trained on {trained} "
                      "(original_max_position_embeddings) and no rope_scaling is set: positions past "
                      f"{trained} run unscaled", severity="warning",
                      evidence={"max_position_embeddings": max_pos, "original_max_position_embeddings": trained,
                                "rope_scaling": raw.get("rope_scaling")})
    ids, tail = far_inputs(ctx)
    n = len(ids)
    problems = engine.validate(positions=[n - 1])
    # the recompute keeps only the last row ([n, vocab] logits would not fit a GPU); in float32 it runs in the
    # same pass as the incremental side (one pass over the weights when streaming: the run's shared pass)
    if engine.dtype == torch.float32:
        inc, full = incremental(ctx, ids, n - tail, FAR_CHUNK, recompute="last")
    else:
        inc, full = incremental(ctx, ids, n - tail, FAR_CHUNK), last_logits(_float32(ctx), ids)
    result = close(inc[-1:], full, engine.dtype)
    if not torch.isfinite(inc).all():
        result["ok"] = False
    if problems or not result["ok"]:
        yield Problem(f"logits at position {n - 1} (of {max_pos}) after {tail} decode steps disagree with a "
                      f"float32 full recompute (relative diff {result['rel_diff']:.3g})"
                      + (f"; {problems[0]}" if problems else ""),
                      severity="error", evidence={**result, "tokens": n, "max_position_embeddings": max_pos,
                                                  "core_problems": problems})


def far_part(ctx):
    """KVC003's scripted run riding on the shared passes (a float32 engine only: its recompute runs on a float32
    engine of its own otherwise)."""
    if ctx.engine.dtype != torch.float32:
        return None
    ids, tail = far_inputs(ctx)
    return scripted_part(incremental_scripts(ids, len(ids) - tail, FAR_CHUNK, "last"))


def far_inputs(ctx) -> tuple[list[int], int]:
    """KVC003's run: the probe ids up to the farthest position it reaches (the context, far_budget and what the
    engine's cache holds) and how many of the last tokens are decoded one by one."""
    engine = ctx.engine
    room = (engine.cache.allocator.num_free - 1) * engine.cache.block_size   # what the engine's cache can hold
    if engine.streaming:   # both sides of the comparison are in the cache at once (one pass)
        room = room // 2 - engine.cache.block_size
    n = min(engine.config.max_position_embeddings, far_budget(ctx), room)
    return probe_sequence(ctx, n), min(4, n - 1)


def last_logits(engine, ids: list[int]) -> torch.Tensor:
    """[1, vocab] logits of the last position of one fresh prefill of ids."""
    with engine.scratch() as (seq,):
        return engine.prefill([seq], [ids])


def _float32(ctx):
    from reference_engine.engine import Engine
    return Engine.from_pretrained(ctx.model_dir, device=ctx.device, dtype="float32",
                                  num_blocks=far_budget(ctx) // 16 + 2, streaming=ctx.engine.streaming)
