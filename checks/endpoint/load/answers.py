"""EPT11x: greedy answers that change when the server is busy.

Each probe is asked alone several times (the noise floor) and again while background traffic runs (mixed
lengths, shared prefixes, long prompts, cancelled requests); every answer is compared with the probe's first
solo answer (checks/endpoint/load/compare.py): exact match, near-tie flip, corruption or cross-talk.
"""
from __future__ import annotations

from checks.endpoint.load.inputs import LoadInputs
from checks.catalogue.registry import Problem, Skip, check

FREQUENT_FLIPS = 0.25     # near-tie flips in this share of the compared answers or more: a warning


def _compared(ctx: LoadInputs) -> list[dict]:
    if not ctx.run.solo:
        raise Skip("no probe answers: " + "; ".join(f"{k}: {v}" for k, v in ctx.run.skipped.items()))
    return [c for c in ctx.classes if c["kind"] != "failed"]


def _where(c: dict) -> str:
    return "alone" if c["phase"] == "solo" else "under load"


@check("EPT110", category="endpoint", severity="info", needs=("load",),
       hint="answers that change alone are the server's noise floor; under load see EPT111-EPT113")
def answers_under_load(ctx: LoadInputs):
    """Per probe: exact-match rate alone and under load, the first divergent token, agreement with the reference.

    The probes are greedy (temperature 0) chat questions with top logprobs. Alone, repeated answers should be
    identical; the first solo answer is also replayed through the reference engine (teacher forcing) as
    `probe endpoint` does. Under load, a batch-invariant server gives the same answer again."""
    compared = _compared(ctx)
    rows = []
    for probe in dict.fromkeys(a.probe for a in ctx.run.solo):
        row = {"probe": probe}
        for phase in ("solo", "load"):
            mine = [c for c in ctx.classes if c["probe"] == probe and c["phase"] == phase]
            failed = sum(c["kind"] == "failed" for c in mine)
            total = len(mine) - failed + (1 if phase == "solo" else 0)        # the baseline matches itself
            same = sum(c["kind"] == "match" for c in mine) + (1 if phase == "solo" else 0)
            row[f"{phase}_exact"] = (f"{same}/{total}" + (f" ({failed} failed)" if failed else "")
                                     if mine or phase == "solo" else "-")
        first = next((c for c in ctx.classes if c["probe"] == probe and c["kind"] not in ("match", "failed")), None)
        row["first_divergence"] = (f"{first['kind']} at token {first.get('position')}: "
                                   f"{first.get('baseline_token')!r} vs {first.get('other_token')!r}"
                                   if first else "-")
        rows.append(row)
    agreement = ctx.reference_agreement()
    for row in rows:
        ref = agreement.get(row["probe"])
        row["reference_agree"] = f"{ref['agree']}/{ref['compared']}" if isinstance(ref, dict) else "-"
    kinds = {}
    for c in compared:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    loaded = len(ctx.run.loaded)
    yield Problem(f"{len(rows)} probes, {len(ctx.run.solo)} answers alone and {loaded} under load "
                  f"({ctx.run.background_workers} background clients): "
                  + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())), severity="info",
                  evidence={"probes": rows, "classes": kinds, "reference": agreement,
                            "background_requests": len(ctx.run.background),
                            "skipped": ctx.run.skipped or None})


@check("EPT111", category="endpoint", severity="warning", needs=("load",),
       hint="expected from batch-variant kernels (the answer depends on the batch it ran in); where it matters "
            "use batch-invariant kernels (vLLM VLLM_BATCH_INVARIANT=1) or a single slot")
def near_tie_flips(ctx: LoadInputs):
    """Greedy answers that flip between nearly tied tokens (batch nondeterminism, not a bug by itself).

    At the first token where an answer differs from the baseline, each side's token is in the other's top-k
    with a small logprob gap (vLLM's check_logprobs_close rule): a different batch shape rounded the tie the
    other way. Info; a warning when a quarter of the answers or more flip."""
    compared = _compared(ctx)
    flips = [c for c in compared if c["kind"] == "near-tie"]
    if not flips:
        yield Problem(f"no near-tie flip in {len(compared)} compared answers", severity="info")
        return
    share = len(flips) / max(len(compared), 1)
    first = flips[0]
    yield Problem(f"{len(flips)} of {len(compared)} greedy answers flipped at a near tie (first: probe "
                  f"{first['probe']!r} {_where(first)} at token {first['position']}: {first['baseline_token']!r} "
                  f"vs {first['other_token']!r}, gaps {first['gaps_nats']} nats)",
                  severity="warning" if share >= FREQUENT_FLIPS else "info",
                  evidence={"flips": flips, "share": round(share, 4)})


@check("EPT112", category="endpoint", severity="error", needs=("load",),
       hint="the server computes wrong tokens when busy: suspect prefix caching, chunked prefill or batched "
            "kernels; retry with them off (vLLM --no-enable-prefix-caching / --no-enable-chunked-prefill, "
            "llama.cpp --parallel 1) and report it upstream with this probe")
def corruption(ctx: LoadInputs):
    """Greedy answers that change under load beyond a near tie (corruption).

    At the first divergent token, one side's token is not in the other's top-k or the gap is large: this is
    not rounding, the answer was computed from something else (a wrong KV block, a corrupted prefix cache,
    a chunked-prefill bug). The finding names the divergent token as text on both sides."""
    compared = _compared(ctx)
    bad = [c for c in compared if c["kind"] == "corruption"]
    if not bad:
        yield Problem(f"no corrupted answer in {len(compared)} compared answers", severity="info")
        return
    first = bad[0]
    detail = f" ({first['detail']})" if first.get("detail") else ""
    yield Problem(f"{len(bad)} of {len(compared)} greedy answers changed beyond a near tie; first: probe "
                  f"{first['probe']!r} {_where(first)} at token {first.get('position')}: alone "
                  f"{first.get('baseline_token')!r}, now {first.get('other_token')!r}{detail}",
                  evidence={"corrupted": bad})


@check("EPT113", category="endpoint", severity="error", needs=("load",),
       hint="answers are routed to the wrong request or share KV state: check the server's and any proxy's "
            "request/stream bookkeeping and prefix-cache isolation")
def cross_talk(ctx: LoadInputs):
    """An answer that carries another in-flight request's content (cross-talk).

    Background prompts carry order codes no probe has; a probe answer naming one, or opening like another
    probe's or request's answer, was fed or given someone else's state."""
    compared = _compared(ctx)
    found = [c for c in compared if c["kind"] == "cross-talk"]
    if not found:
        yield Problem(f"no cross-talk in {len(compared)} compared answers", severity="info")
        return
    first = found[0]
    yield Problem(f"{len(found)} of {len(compared)} answers carried another request's content; first: probe "
                  f"{first['probe']!r} {_where(first)}: {first['detail']}", evidence={"cross_talk": found})
