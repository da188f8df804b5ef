"""Diff section 3, weights: every tensor matched by role across naming schemes (HF names, GGUF names), compared
one pair at a time (never two whole checkpoints in memory): NMSE (dB), max |Δ|, cosine; a ranked table and a
per-layer plot; tensors only on one side. Against a GGUF whose converter folds config values into the weights
(Falcon-H1's multipliers), the Hugging Face side is compared as the converter should have stored it."""
from __future__ import annotations

import math

from checks.diff.tensor_stats import TensorDiff, by_part, compare, match_roles, role_of, stored_as, to_db
from reference_engine.files.quant.module import quant_side
from checks.catalogue.registry import Problem, check

SHOWN = 15
NMSE_WARN_DB = -10.0           # a tensor with error above a tenth of its energy was replaced, not rounded


def tensor_diffs(ctx) -> tuple[list[TensorDiff], list[str], list[str], list[dict]]:
    """(diffs of matched tensors, ref-only, cand-only, shape mismatches), computed once per run."""
    if "diff_weights" not in ctx.state:
        wa, wb = ctx.ref.weights, ctx.cand.weights
        # GGUFWeights carries its architecture: llama.cpp names mean different tensors per architecture
        pairs, ref_only, cand_only = match_roles(list(wa.names), list(wb.names), getattr(wa, "arch", None),
                                                 getattr(wb, "arch", None))
        # a quantized side's scales that its table leaves visible (kv k_scale/v_scale, activation scales)
        # belong to the quantization, not to the model: not "only on one side"
        ref_only, cand_only = [n for n in ref_only if not quant_side(n)], [n for n in cand_only if not quant_side(n)]
        diffs, shapes = [], []
        fold_a, fold_b = folds(ctx.ref, wa, wb), folds(ctx.cand, wb, wa)
        for role, name_a, name_b in pairs:
            a, b = fold_a(name_a, wa.get(name_a)), fold_b(name_b, wb.get(name_b))
            if tuple(a.shape) != tuple(b.shape):
                shapes.append({"tensor": role, "reference": list(a.shape), "candidate": list(b.shape)})
                continue
            nmse, max_abs, cos = compare(a, b)
            diffs.append(TensorDiff(role, role_of(name_a, getattr(wa, "arch", None))[1], tuple(a.shape), nmse,
                                    max_abs, cos, stored_as(wb, name_b) or stored_as(wa, name_a)))
            del a, b
        ctx.state["diff_weights"] = (diffs, ref_only, cand_only, shapes)
    return ctx.state["diff_weights"]


def folds(side, weights, other):
    """(name, tensor) -> tensor: a Hugging Face side's tensors as the other side's GGUF converter should have
    stored them, when it folds config values into the weights (GGUFArch.folds: Falcon-H1's multipliers)."""
    arch = getattr(other, "arch", None)
    if getattr(arch, "folds", None) is None or getattr(weights, "arch", None) is not None:
        return lambda name, t: t
    raw = side.raw_config

    def fold(name, t):
        factor = arch.folds(raw, name)
        return t if factor is None or tuple(t.shape[:1]) != tuple(getattr(factor, "shape", t.shape)[:1]) \
            else t * factor
    return fold


def _finite(x: float):
    return round(x, 3) if math.isfinite(x) else None


def per_layer_plot(diffs: list[TensorDiff]) -> dict:
    """Worst NMSE (dB) per layer for attention and MLP projections (gaps where a layer is bit-identical)."""
    layers = sorted({d.layer for d in diffs if d.layer is not None})
    series = {}
    for label, parts in (("attention", ("q_proj", "k_proj", "v_proj", "o_proj")),
                         ("mlp", ("gate_proj", "up_proj", "down_proj")), ("norms", ("layernorm",))):
        values = []
        for layer in layers:
            worst = max((d.nmse for d in diffs if d.layer == layer and any(p in d.role for p in parts)), default=0.0)
            values.append(_finite(to_db(worst)))
        series[label] = values
    return {"kind": "line", "title": "Weight NMSE per layer (worst tensor)", "x": layers, "series": series,
            "x_label": "layer", "y_label": "NMSE (dB)"}


@check("DIF020", category="diff", severity="error", needs=("pair",),
       hint="Expected after quantization; otherwise the named tensors were changed or converted wrongly.")
def weights_differ(ctx):
    """Per-tensor NMSE, max |Δ| and cosine of the two checkpoints, ranked; a plot per layer.

    Tensors are matched by role (layer + part), so an HF directory and a GGUF file compare tensor by tensor;
    a quantized safetensors side (GPTQ, AWQ, compressed-tensors, FP8, bitsandbytes) is compared through its
    dequantized weights, one module at a time, and the info finding sums the error per part (q_proj,
    down_proj, ...) so the parts the quantizer hurt most stand out.
    Info: the ranked table. Warning: a tensor whose NMSE is above -10 dB (threshold nmse_warn_db) — not a
    rounding but another tensor (a wrong transpose, a missing q/k permutation, a different checkpoint).
    Error: a tensor of another shape."""
    diffs, _, _, shapes = tensor_diffs(ctx)
    for s in shapes:
        yield Problem(f"{s['tensor']}: shape {s['reference']} in the reference, {s['candidate']} in the candidate",
                      severity="error", evidence=s)
    if not diffs:
        return
    warn_db = ctx.threshold("DIF020", "nmse_warn_db", NMSE_WARN_DB)
    ranked = sorted(diffs, key=lambda d: -d.nmse)
    changed = [d for d in diffs if d.nmse > 0]
    table = [{"tensor": d.role, "nmse_db": _finite(d.nmse_db), "max_abs": d.max_abs, "cosine": round(d.cosine, 8),
              **({"stored": d.stored} if d.stored else {})} for d in ranked[:SHOWN]]
    for d in ranked:
        if d.nmse_db > warn_db:
            yield Problem(f"{d.role}: NMSE {d.nmse_db:.1f} dB (cosine {d.cosine:.4f}): not a rounding difference",
                          severity="warning", evidence={"tensor": d.role, "nmse_db": _finite(d.nmse_db),
                                                        "cosine": d.cosine, "max_abs": d.max_abs,
                                                        "threshold_db": warn_db})
    worst = ranked[0]
    summary = (f"{len(changed)} of {len(diffs)} matched tensors differ; worst {worst.role} NMSE "
               f"{worst.nmse_db:.1f} dB, max |Δ| {worst.max_abs:.3g}, cosine {worst.cosine:.6f}") if changed else \
        f"all {len(diffs)} matched tensors are bit-identical (NMSE 0, max |Δ| 0, cosine 1)"
    quantized = sum(1 for d in diffs if d.stored)
    if quantized:
        summary += f"; {quantized} dequantized from the candidate's quantized storage"
    yield Problem(summary, severity="info", evidence={"matched": len(diffs), "differing": len(changed),
                                                      "ranked": table, "by_part": by_part(changed),
                                                      "quantized": quantized},
                  data={"plot": per_layer_plot(diffs)} if changed else None)


@check("DIF021", category="diff", severity="warning", needs=("pair",),
       hint="A tensor only on one side: a tied lm_head, a dropped bias, or a different architecture.")
def tensors_on_one_side(ctx):
    """Tensors present in only one of the checkpoints (after matching names by role).

    A candidate without lm_head.weight that the reference has (or the reverse) means the embeddings got tied
    or untied; a missing bias or norm changes the model outright."""
    _, ref_only, cand_only, _ = tensor_diffs(ctx)
    if ref_only:
        yield Problem(f"{len(ref_only)} tensors only in the reference (first: {ref_only[0]})",
                      evidence={"tensors": ref_only[:30], "count": len(ref_only)})
    if cand_only:
        yield Problem(f"{len(cand_only)} tensors only in the candidate (first: {cand_only[0]})",
                      evidence={"tensors": cand_only[:30], "count": len(cand_only)})
