"""The evidence a failing competence check carries: the first failing layer from the logit lens (lens.py),
with that layer's quantized modules when there are any, and where to look next (next_steps.py). Made once per
run, only when a check fails."""
from __future__ import annotations

import math

from checks.competence.lens import lens_curve, first_failing
from checks.competence.next_steps import where_next
from checks.competence.runs import prompts
from checks.shared.weights.tensor_layout import LAYER_INDEX
from probes.competence import text_bound, unigram_loss

FLOAT = ("F64", "F32", "F16", "BF16")


def quantized_modules(ctx, layer: int) -> list[str]:
    """The layer's tensors stored quantized (a quantized safetensors module or a GGUF block type)."""
    try:
        weights = ctx.weights
    except Exception:
        return []
    out = []
    for name in weights.names:
        m = LAYER_INDEX.search(name)
        if m is None or int(m.group(1)) != layer:
            continue
        quantized = weights.is_quantized(name) if hasattr(weights, "is_quantized") else \
            str(weights.info(name).dtype).upper() not in FLOAT
        if quantized:
            out.append(name)
    return out


def localise(ctx) -> dict:
    """{"first_failing_layer", "quantized_modules", "lens": [per layer], ...} (cached; {} when the lens
    cannot run, with the reason)."""
    key = ("competence", "lens", ctx.quick)
    if key not in ctx.state:
        try:
            text, copy = prompts(ctx)
            curve = lens_curve(ctx.engine, ctx.weights, text.ids, copy)
            bound = text_bound(math.log(max(ctx.engine.config.vocab_size, 2)), unigram_loss(text.scored_ids))
            layer = first_failing(curve, bound)
            out = {"first_failing_layer": layer, "lens": [p.as_dict() for p in curve]}
            if layer is not None:
                out["quantized_modules"] = quantized_modules(ctx, layer)
        except Exception as e:          # the finding stands without its localisation
            out = {"lens_error": f"{type(e).__name__}: {e}"}
        ctx.state[key] = out
    return ctx.state[key]


def where(loc: dict) -> str:
    """'; fails from layer 3 (quantized: ...)' for the message, '' when not localised."""
    layer = loc.get("first_failing_layer")
    if layer is None:
        return ""
    mods = loc.get("quantized_modules") or []
    shown = f" (quantized: {', '.join(m.rsplit('.', 2)[-2] for m in mods[:4])})" if mods else ""
    return f"; the logit lens fails from layer {layer}{shown}"


def failure_evidence(ctx) -> tuple[str, dict]:
    """(message suffix, evidence) for a judged failure."""
    loc = localise(ctx)
    return where(loc), {**loc, **where_next(ctx)}
