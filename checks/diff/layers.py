"""Diff section 5, where it starts: per layer and sub-module hidden-state NMSE (dB) and cosine of the candidate
against the reference on the same tokens, the first point that crosses a threshold, and what each layer adds
(checks/diff/layer_walk.py)."""
from __future__ import annotations

import math

from checks.diff.layer_walk import table_rows, trace
from checks.diff.logits import corpus_text, encode_prefix
from checks.catalogue.registry import Problem, Skip, check

TRACE_TOKENS, QUICK_TRACE_TOKENS = 128, 48
THRESHOLD_DB = -40.0           # NMSE 1e-4: above fp32/bf16 rounding, below what changes predictions


def trace_ids(ctx, ref, cand) -> list[int]:
    n = min(QUICK_TRACE_TOKENS if ctx.quick else TRACE_TOKENS, ref.config.max_position_embeddings,
            cand.config.max_position_embeddings)
    ids = encode_prefix(ctx.ref.tokenizer, corpus_text(ctx), n, add_special_tokens=True)
    if not ids:
        raise Skip("the text encodes to no token")
    if max(ids) >= cand.config.vocab_size:
        raise Skip(f"the reference's token ids reach {max(ids)}, past the candidate's vocabulary")
    return ids


def _db(value: float):
    return round(value, 2) if math.isfinite(value) else None


def layer_plot(t, threshold: float) -> dict:
    return {"kind": "line", "title": "Where the models part ways: NMSE per layer (dB)",
            "x": list(range(t.num_layers)),
            "series": {"residual stream (accumulated)": [_db(v) for v in t.residual_db()],
                       "attention (own error)": [_db(v) for v in t.own_db("attn")],
                       "MLP (own error)": [_db(v) for v in t.own_db("mlp")]},
            "x_label": "layer", "y_label": "NMSE (dB)", "hlines": {"threshold": threshold}}


@check("DIF040", category="diff", severity="warning", needs=("pair",),
       hint="Look at the named layer's tensors (DIF020) and at how that layer was converted or quantized.")
def where_it_starts(ctx):
    """The first layer / sub-module where the candidate's hidden states leave the reference's (NMSE above -40 dB).

    Both models run on the same tokens with capture hooks. Propagated: the candidate runs freely and every hook
    point (embedding, input norm, attention, post norm, MLP, residual; final norm, logits) is compared; the
    residual stream's dB growth per layer is what each layer adds. Isolated: each point is replaced by the
    reference's value after being compared, so every sub-module's number is its own error alone (the golden
    method's bisection with a second model as the golden reference). A warning names the first point above
    the threshold (threshold_db); info when nothing crosses it."""
    ref, cand = ctx.engines()
    if ref.config.hidden_size != cand.config.hidden_size or \
            ref.config.num_hidden_layers != cand.config.num_hidden_layers:
        raise Skip("the models have different hidden sizes or layer counts (DIF001): no point to compare")
    threshold = ctx.threshold("DIF040", "threshold_db", THRESHOLD_DB)
    t = trace(ref, cand, trace_ids(ctx, ref, cand))
    first = t.first_crossing(threshold)
    first_own = t.first_crossing(threshold, isolated=True)
    largest = t.largest_own()
    logits = t.point(t.num_layers, "logits")
    evidence = {"tokens": t.tokens, "threshold_db": threshold,
                "first_crossing": _point(first), "first_own_crossing": _point(first_own),
                "largest_own_error": _point(largest), "logits": _point(logits), "layers": table_rows(t)}
    data = {"plot": layer_plot(t, threshold)}
    if first is None and first_own is None:
        worst = max(t.propagated, key=lambda p: p.nmse, default=None)
        detail = "bit-identical at every point" if worst is None or worst.nmse == 0 else \
            f"largest {worst.where} at {worst.db:.1f} dB"
        yield Problem(f"no layer crosses {threshold:.0f} dB on {t.tokens} tokens ({detail})", severity="info",
                      evidence=evidence, data=data)
        return
    named = first_own if first_own is not None and (first is None or _key(first_own) <= _key(first)) else first
    kind = "its own error" if named is first_own else "accumulated"
    message = (f"the models part ways at {named.where}: NMSE {named.db:.1f} dB ({kind}; threshold "
               f"{threshold:.0f} dB), cosine {named.cosine:.6f}")
    if largest is not None and largest.where != named.where:
        message += f"; largest own error at {largest.where} ({largest.db:.1f} dB)"
    if logits is not None:
        message += f"; logits {logits.db:.1f} dB"
    yield Problem(message, evidence=evidence, data=data)


def _key(p) -> tuple[int, int]:
    from checks.diff.layer_walk import ORDER
    return p.layer, ORDER.get(p.module, 9)


def _point(p) -> dict | None:
    if p is None:
        return None
    return {"where": p.where, "layer": p.layer, "module": p.module, "nmse_db": _db(p.db), "nmse": p.nmse,
            "cosine": p.cosine}
