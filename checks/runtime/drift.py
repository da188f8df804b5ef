"""Drift against a golden baseline (`llmdoctor check MODEL --baseline golden.json`): the probes' token ids,
per-position KL divergence and top-1 agreement of the logits, and the first token where the greedy
continuation departs from the recorded one. Without --baseline these checks are skipped."""
from __future__ import annotations

import math

import torch

from checks.shared.probe_runs import eos_ids, greedy_traces
from checks.shared.prompts import render_chat
from checks.catalogue.registry import CannotRun, Problem, Skip, check

SAME_DTYPE_KL, CROSS_DTYPE_KL = 1e-3, 5e-2
REST_FLOOR = 1e-6
TOP_K = 5     # across dtypes an argmax may move, but only within the recorded top 5 (vLLM's rule)


def baseline(ctx) -> dict:
    if ctx.baseline is None:
        raise CannotRun("no --baseline given")
    if "baseline" not in ctx.state:
        from checks.shared.baseline_file import BaselineError, load
        try:
            ctx.state["baseline"] = load(ctx.baseline)
        except BaselineError as e:
            ctx.state["baseline"] = e
    value = ctx.state["baseline"]
    if isinstance(value, Exception):
        raise CannotRun(f"baseline unreadable: {value}")
    return value


def kl_top_k(row: dict, logprobs: torch.Tensor) -> float:
    """KL(baseline || now) over the baseline's top-k ids plus one bucket for all other tokens (nats)."""
    ids = row["ids"]
    p = torch.tensor([math.exp(v) if v is not None else 0.0 for v in row["logprobs"]], dtype=torch.float64)
    q = logprobs[ids].exp()
    rest_p, rest_q = max(1.0 - float(p.sum()), 0.0), max(1.0 - float(q.sum()), 0.0)
    keep = p > 0
    kl = float((p[keep] * (p[keep].log() - q[keep].clamp_min(1e-300).log())).sum())
    if rest_p > REST_FLOOR:   # below it the "rest" is the rounding of the stored log-probabilities
        kl += rest_p * (math.log(rest_p) - math.log(max(rest_q, REST_FLOOR)))
    return max(kl, 0.0)


def compare_probe(engine, probe: dict) -> dict:
    """Per-position KL and top-1 agreement of the current model on the baseline's ids."""
    logits = engine.logits(probe["ids"]).double().cpu()
    logprobs = torch.log_softmax(logits, dim=-1)
    kls = [kl_top_k(row, lp) for row, lp in zip(probe["top_k"], logprobs)]
    finite = bool(torch.isfinite(logits).all())
    argmax = [int(lp.argmax()) for lp in logprobs]
    agree = [a == row["ids"][0] for a, row in zip(argmax, probe["top_k"])]
    outside = [i for i, (a, row) in enumerate(zip(argmax, probe["top_k"])) if a not in row["ids"][:TOP_K]]
    return {"label": probe.get("label", "?"), "kl": kls if finite else [float("inf")] * len(kls),
            "top1": sum(agree) / len(agree) if agree else 1.0, "outside_top_k": outside, "finite": finite}


def drift_results(ctx) -> tuple[dict, list[dict]]:
    doc = baseline(ctx)
    if "drift" not in ctx.state:
        vocab = ctx.engine.config.vocab_size
        probes = [p for p in doc["probes"] if all(0 <= t < vocab for t in p["ids"])]
        if not probes:
            raise Skip("no baseline probe fits this model's vocabulary (VOC002)")
        results = [compare_probe(ctx.engine, p) for p in probes]
        traces = greedy_traces(ctx.engine, [p["ids"] for p in probes], max(len(p.get("greedy", [])) for p in probes),
                               eos_ids(ctx.engine))
        for r, p, t in zip(results, probes, traces):
            r["first_divergence"] = first_divergence(p.get("greedy", []), t.tokens)
            r["greedy_now"] = t.tokens
            r["greedy_then"] = p.get("greedy", [])
        ctx.state["drift"] = results
    return doc, ctx.state["drift"]


def first_divergence(then: list[int], now: list[int]) -> int | None:
    """Index of the first generated token that differs (None when the shorter one is a prefix of the other)."""
    return next((i for i, (a, b) in enumerate(zip(then, now)) if a != b), None)


def kl_limit(ctx, doc: dict) -> float:
    default = SAME_DTYPE_KL if doc.get("dtype") == ctx.dtype else CROSS_DTYPE_KL
    return ctx.threshold("DRF001", "max_kl", default)


@check("DRF001", category="golden", severity="error", needs=("engine", "tokenizer"),
       hint="Diff the conversion (weights, config, dtype) against the run that wrote the baseline.")
def logit_drift(ctx):
    """The model's logits on the baseline's probe ids match the baseline (KL per position, top-1 agreement).

    For every probe in the baseline, the current model runs on the recorded token ids (so a tokenizer
    change is reported separately, DRF002). Per position: KL(baseline || now) over the recorded top-k
    tokens plus an "everything else" bucket, and whether the argmax is the recorded one. Fires when the
    largest KL exceeds `max_kl` (1e-3 nats when the dtype matches the baseline's, 5e-2 across dtypes)
    or top-1 agreement drops below `min_top1` (default 0.98; across dtypes an argmax may change, but
    only to a token in the recorded top 5). The evidence names the first token where the greedy
    continuation departs from the recorded one. This is the CI gate that catches a
    conversion script, quantization or config edit that silently changes the model.
    """
    try:
        baseline(ctx)
    except Skip:
        error = ctx.state.get("baseline")
        if isinstance(error, Exception):   # a --baseline that cannot be used must not pass silently
            yield Problem(f"cannot use the baseline: {error}", evidence={"baseline": str(ctx.baseline)},
                          hint="Record it again with `llmdoctor baseline MODEL -o FILE`.")
            return
        raise
    doc, results = drift_results(ctx)
    limit = kl_limit(ctx, doc)
    same_dtype = doc.get("dtype") == ctx.dtype
    min_top1 = ctx.threshold("DRF001", "min_top1", 0.98)
    bad = [r for r in results if not r["finite"] or max(r["kl"]) > limit
           or (r["top1"] < min_top1 if same_dtype else bool(r["outside_top_k"]))]
    if not bad:
        return
    worst = max(bad, key=lambda r: max(r["kl"]))
    pos = max(range(len(worst["kl"])), key=lambda i: worst["kl"][i])
    tok = ctx.tokenizer
    div = worst["first_divergence"]
    evidence = {"probes": [{"label": r["label"], "max_kl": max(r["kl"]), "top1_agreement": r["top1"],
                            "argmax_outside_top_k": r["outside_top_k"], "first_divergence": r["first_divergence"]}
                           for r in results],
                "max_kl_limit": limit, "baseline_dtype": doc.get("dtype"), "dtype": ctx.dtype}
    if div is not None:
        evidence["first_diverging_token"] = {
            "probe": worst["label"], "index": div,
            "baseline": _decode(tok, worst["greedy_then"][:div + 1]),
            "now": _decode(tok, worst["greedy_now"][:div + 1])}
    yield Problem(f"logits drifted from the baseline on {len(bad)} of {len(results)} probes: max KL "
                  f"{max(worst['kl']):.3g} nats at {worst['label']} position {pos}, top-1 agreement "
                  f"{worst['top1']:.0%}" + (f", greedy output departs at token {div}" if div is not None else ""),
                  evidence=evidence)


@check("DRF002", category="golden", severity="error", needs=("tokenizer",),
       hint="Restore the tokenizer files the baseline was recorded with (tokenizer.json, tokenizer_config.json).")
def token_drift(ctx):
    """The tokenizer still encodes the baseline's probe texts to the recorded token ids.

    Re-encodes every probe text of the baseline (the chat probe re-rendered with the current template)
    and compares ids: a changed normalizer, merges, added tokens, BOS handling or chat template shows up
    here before it shows up as a worse model.
    """
    doc = baseline(ctx)
    tok = ctx.tokenizer
    for probe in doc["probes"]:
        if probe.get("chat"):
            from checks.shared.prompts import CHAT_PROBE
            rendered = render_chat(tok, CHAT_PROBE)
            now = tok.encode(rendered, add_special_tokens=False) if rendered is not None else []
        else:
            now = tok.encode(probe["text"])
        then = probe["ids"]
        if now != then:
            at = first_divergence(then, now)
            at = min(len(then), len(now)) if at is None else at
            yield Problem(f"{probe.get('label', '?')}: token ids differ from the baseline at index {at} "
                          f"({len(then)} then, {len(now)} now)",
                          evidence={"text": probe["text"][:200], "baseline_ids": then[:at + 8],
                                    "ids_now": now[:at + 8]})


@check("DRF003", category="golden", severity="info", needs=("engine", "tokenizer"),
       hint="Informational: the drift measured against the baseline, per probe and position.")
def drift_summary(ctx):
    """Drift summary against the baseline (info): per-probe max KL, top-1 agreement, plot of KL per position.

    Always reported when --baseline is given, so a passing CI run still shows how close the model is to
    the recorded one: the largest KL(baseline || now) and the lowest top-1 agreement over the probes, the
    first diverging greedy token per probe, and a plot of KL per position for the HTML report.
    """
    doc, results = drift_results(ctx)
    series = {r["label"]: [k if math.isfinite(k) else None for k in r["kl"]] for r in results}
    width = max(len(r["kl"]) for r in results)
    series = {k: v + [None] * (width - len(v)) for k, v in series.items()}
    yield Problem(f"baseline {doc.get('created_at', '?')} ({doc.get('dtype')}): max KL "
                  f"{max(max(r['kl']) for r in results):.3g} nats, min top-1 agreement "
                  f"{min(r['top1'] for r in results):.0%} over {len(results)} probes",
                  evidence={"baseline": str(ctx.baseline), "baseline_fingerprint": doc.get("fingerprint"),
                            "probes": [{"label": r["label"], "max_kl": max(r["kl"]), "top1_agreement": r["top1"],
                                        "first_divergence": r["first_divergence"]} for r in results]},
                  data={"plot": {"kind": "line", "title": "KL(baseline || now) per position", "x": list(range(width)),
                                 "series": series, "x_label": "position", "y_label": "KL (nats)"}})


def _decode(tok, ids: list[int]) -> str:
    try:
        return tok.decode(ids, skip_special_tokens=True)
    except Exception:
        return str(ids)
