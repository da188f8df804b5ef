"""Diff section 6, generation: greedy continuations of the probes side by side, the first diverging token and
both models' top-5 at that step."""
from __future__ import annotations

import torch

from checks.shared.probe_runs import eos_ids, greedy_traces
from checks.shared.prompts import encode_probes, new_tokens, probe_texts
from checks.catalogue.registry import Problem, Skip, check

TOP = 5


def top5(engine, tok, ids: list[int]) -> list[dict]:
    """The TOP most likely next tokens after ids: id, text (this side's tokenizer), probability."""
    probs = torch.softmax(engine.logits(ids)[-1].double().cpu(), dim=-1)
    values, idx = probs.topk(min(TOP, probs.shape[-1]))
    return [{"id": int(i), "text": _text(tok, int(i)), "p": round(float(v), 6)} for v, i in zip(values, idx)]


def _text(tok, token: int) -> str:
    try:
        return tok.decode([token])
    except Exception:  # an id this side's tokenizer does not know
        return f"<id {token}>"


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def _probes(ctx, ref):
    vocab = min(ref.config.vocab_size, ctx.cand.engine.config.vocab_size)
    probes = [p for p in encode_probes(ctx.ref.tokenizer, probe_texts(ctx.quick)) if max(p.ids) < vocab]
    if not probes:
        raise Skip("no probe fits both vocabularies")
    return probes


@check("DIF050", category="diff", severity="warning", needs=("pair",),
       hint="Expected for a lossy quantization on long continuations; early divergence points at DIF040's layer.")
def greedy_divergence(ctx):
    """Greedy continuations of the probes diverge: the first differing token, with both models' top-5 there.

    Both models continue the same prompt ids greedily; the report shows the two continuations side by side,
    the step where they part, and each model's five most likely tokens at that step (a near tie that flipped
    is benign, a confident disagreement is not). Info when every continuation is identical."""
    if ctx.cand.kind == "baseline":
        yield from _against_baseline(ctx)
        return
    ref, cand = ctx.engines()
    probes = _probes(ctx, ref)
    steps = new_tokens(ctx.quick)
    traces_a = greedy_traces(ref, [p.ids for p in probes], steps, eos_ids(ref))
    traces_b = greedy_traces(cand, [p.ids for p in probes], steps, eos_ids(cand))
    tok_a, tok_b = ctx.ref.tokenizer, ctx.cand.tokenizer
    diverged = 0
    for probe, a, b in zip(probes, traces_a, traces_b):
        at = first_divergence(a.tokens, b.tokens)
        if at is None:
            continue
        diverged += 1
        context = list(probe.ids) + a.tokens[:at]
        yield Problem(f"{probe.label} {probe.text[:40]!r}: continuations part at token {at + 1} of {steps}: "
                      f"reference {_text(tok_a, a.tokens[at]) if at < len(a.tokens) else '<end>'!r} vs candidate "
                      f"{_text(tok_b, b.tokens[at]) if at < len(b.tokens) else '<end>'!r}",
                      evidence={"prompt": probe.text, "step": at,
                                "reference": tok_a.decode(a.tokens, skip_special_tokens=True),
                                "candidate": tok_b.decode(b.tokens, skip_special_tokens=True),
                                "common": tok_a.decode(a.tokens[:at], skip_special_tokens=True),
                                "reference_top5": top5(ref, tok_a, context),
                                "candidate_top5": top5(cand, tok_b, context)})
    if not diverged:
        yield Problem(f"all {len(probes)} greedy continuations ({steps} tokens) are identical", severity="info",
                      evidence={"probes": len(probes), "steps": steps,
                                "continuations": [tok_a.decode(t.tokens, skip_special_tokens=True)
                                                  for t in traces_a]})


def _against_baseline(ctx):
    doc, ref = ctx.cand.baseline, ctx.ref.engine
    probes = [p for p in doc["probes"] if p.get("greedy") and max(p["ids"]) < ref.config.vocab_size]
    if not probes:
        raise Skip("the baseline records no greedy continuation that fits the reference")
    tok = ctx.ref.tokenizer
    traces = greedy_traces(ref, [p["ids"] for p in probes], max(len(p["greedy"]) for p in probes), eos_ids(ref))
    diverged = 0
    for probe, trace in zip(probes, traces):
        recorded = probe["greedy"]
        at = first_divergence(trace.tokens[:len(recorded)], recorded)
        if at is None:
            continue
        diverged += 1
        yield Problem(f"{probe.get('label', 'probe')}: the reference's continuation leaves the baseline's at token "
                      f"{at + 1}",
                      evidence={"step": at, "reference": tok.decode(trace.tokens, skip_special_tokens=True),
                                             "candidate": probe.get("greedy_text", ""),
                                             "reference_top5": top5(ref, tok, list(probe["ids"]) + trace.tokens[:at]),
                                             "candidate_top5": "not recorded in a baseline file"})
    if not diverged:
        yield Problem(f"all {len(probes)} recorded greedy continuations are reproduced by the reference",
                      severity="info", evidence={"probes": len(probes)})
