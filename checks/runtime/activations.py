"""Activation statistics (printing min/max/mean/std of intermediate tensors, for every layer): a per-layer table of
hidden states, attention output and MLP output on the probes, with NaN/Inf flags, residual-stream std jumps
of orders of magnitude, and the attention-mask valid ratio of a padded probe batch."""
from __future__ import annotations

import math

from checks.shared.probe_runs import FORWARD, PointStats, forward_runs
from checks.shared.prompts import probe_texts
from checks.catalogue.registry import Problem, check

TABLE_MODULES = ("hidden", "attn", "mlp")
FP16_MAX = 65504.0


def pooled(points: list[PointStats]) -> dict:
    """One row from the same hook point over several probes: min/max/absmax over all, mean and std pooled."""
    good = [p for p in points if p.numel]
    n = sum(p.numel for p in good)
    if not n:
        return {"min": None, "max": None, "mean": None, "std": None, "absmax": None,
                "nonfinite": sum(p.nonfinite for p in points)}
    mean = sum(p.mean * p.numel for p in good) / n
    var = sum((p.std ** 2 + (p.mean - mean) ** 2) * p.numel for p in good) / n
    return {"min": min(p.min for p in good), "max": max(p.max for p in good), "mean": mean,
            "std": math.sqrt(max(var, 0.0)), "absmax": max(p.absmax for p in good),
            "nonfinite": sum(p.nonfinite for p in points)}


def activation_table(runs) -> list[dict]:
    """Rows {layer, module, min, max, mean, std, absmax, nonfinite}: embed, then per layer hidden/attn/mlp."""
    groups: dict[tuple[int, str], list[PointStats]] = {}
    for run in runs:
        for p in run.stats.points:
            if p.module in TABLE_MODULES + ("embed",):
                groups.setdefault((p.layer, p.module), []).append(p)
    order = {m: i for i, m in enumerate(("embed",) + TABLE_MODULES)}
    return [{"layer": layer, "module": module, **pooled(points)}
            for (layer, module), points in sorted(groups.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))]


def residual_stds(table: list[dict]) -> list[tuple[int, float]]:
    """(layer, std) of the residual stream: the embedding (layer -1), then each layer's output."""
    return [(r["layer"], r["std"]) for r in table if r["module"] in ("embed", "hidden") and r["std"] is not None]


def std_jumps(stds: list[tuple[int, float]], factor: float) -> list[dict]:
    out = []
    for (l0, s0), (l1, s1) in zip(stds, stds[1:]):
        if s0 > 0 and s1 > 0 and (s1 / s0 > factor or s0 / s1 > factor):
            out.append({"from_layer": l0, "to_layer": l1, "std_before": s0, "std_after": s1, "ratio": s1 / s0})
    return out


def _plot(table: list[dict]) -> dict:
    layers = sorted({r["layer"] for r in table if r["module"] == "hidden"})
    by = {(r["layer"], r["module"]): r for r in table}
    series = {f"{m} {s}": [by.get((layer, m), {}).get(s) for layer in layers]
              for m in TABLE_MODULES for s in ("absmax", "std")}
    return {"kind": "line", "title": "activation statistics per layer", "x": layers, "series": series,
            "x_label": "layer", "y_label": "|value|", "y_scale": "log", "hlines": {"float16 max": FP16_MAX}}


def mask_ratios(tok, texts: list[str]) -> dict:
    """Attention-mask valid ratio of the probes padded into one batch: overall and per row."""
    batch = tok(texts, padding=True, return_tensors=None)
    masks = batch["attention_mask"]
    cells = sum(len(m) for m in masks)
    return {"overall": sum(map(sum, masks)) / cells if cells else 0.0,
            "rows": [sum(m) / len(m) if m else 0.0 for m in masks]}


@check("ACT001", category="activations", severity="info", needs=("engine", "tokenizer"),
       hint="Read the table for where magnitudes grow; ACT002/ACT003/NUM001 flag what is out of line.",
       shares=(FORWARD,))
def activation_statistics(ctx):
    """Per-layer min/max/mean/std/absmax of hidden states, attention and MLP outputs on the probes (info).

    Printing min/max/mean/std of intermediate tensors, done for every layer at once: the probes run through
    the engine with
    capture hooks and each layer's residual stream (hidden), attention output (o_proj, before the residual
    add) and MLP output (down_proj) are summarised over all probe tokens. Shown as a table in evidence and
    as a log-scale plot (with the float16 limit) in the HTML report. Healthy trained models show a slowly
    growing residual stream with a few "massive activation" layers (SmolLM2-135M: std ~0.1 at the
    embedding, ~400 in the middle layers, absmax ~2.3e4).
    """
    table = activation_table(forward_runs(ctx))
    ratios = mask_ratios(ctx.tokenizer, list(probe_texts(ctx.quick)))
    peak = max((r for r in table if r["absmax"] is not None), key=lambda r: r["absmax"])
    yield Problem(f"activation statistics over {len(forward_runs(ctx))} probes: peak |value| {peak['absmax']:.4g} at "
                  f"layer {peak['layer']} {peak['module']}",
                  evidence={"table": table, "columns": ["layer", "module", "min", "max", "mean", "std", "absmax",
                                                        "nonfinite"],
                            "mask_valid_ratio": ratios},
                  data={"plot": _plot(table)})


@check("ACT002", category="activations", severity="error", needs=("engine", "tokenizer"),
       hint="Check the named layer's weights for NaN/Inf (WGT005) or run in a wider dtype (NUM001).",
       shares=(FORWARD,))
def nonfinite_activations(ctx):
    """No hidden state, attention or MLP output contains NaN or Inf on the probes.

    Reports the first (layer, module) whose output has non-finite values and how many, per probe. A NaN
    anywhere in the stream reaches every later layer and the logits; naming the first one tells whether
    it is a weight (one layer), an overflow (a growing stream) or the embedding (a bad token row).
    """
    for run in forward_runs(ctx):
        bad = next((p for p in run.stats.points if p.nonfinite), None)
        if bad is not None:
            yield Problem(f"{run.probe.label}: {bad.nonfinite} non-finite values first appear at layer {bad.layer} "
                          f"{bad.module}", evidence={"probe": run.probe.label, "layer": bad.layer,
                                                     "module": bad.module, "nonfinite": bad.nonfinite})


@check("ACT003", category="activations", severity="warning", needs=("engine", "tokenizer"),
       hint="Compare the named layers' weights with the original checkpoint (a scaled or mis-converted tensor).",
       shares=(FORWARD,))
def std_jump(ctx):
    """The residual stream's std does not jump or collapse by orders of magnitude from one layer to the next.

    Trained models grow their residual stream gradually; even the "massive activation" layers of real
    models change the std by well under 1000x (SmolLM2-135M: at most ~75x, at layer 11). A jump past
    `max_ratio` (default 1000) between consecutive layers, or a collapse by the same factor, points at a
    scaled, transposed or wrongly dequantized tensor in that layer.
    """
    factor = ctx.threshold("ACT003", "max_ratio", 1000.0)
    jumps = std_jumps(residual_stds(activation_table(forward_runs(ctx))), factor)
    for j in jumps:
        kind = "jumps" if j["ratio"] > 1 else "collapses"
        yield Problem(f"residual std {kind} {j['ratio']:.3g}x from layer {j['from_layer']} to {j['to_layer']} "
                      f"({j['std_before']:.3g} -> {j['std_after']:.3g})", evidence=j)
