"""Numerics: the probes in float16 and bfloat16 next to float32. Largest activation and logit magnitudes
against each dtype's range, per-dtype logit divergence, and the dtype that is safe to serve in."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from checks.catalogue.registry import SharedRun
from checks.catalogue.locations import config_key
from checks.shared.passes import Part
from checks.shared.probe_runs import (FORWARD, ForwardRun, StatsRecorder, forward_runs, run_forward,
                                      run_forwards)
from checks.shared.prompts import probe_inputs
from checks.catalogue.registry import Problem, Skip, check

LOW_DTYPES = ("bfloat16", "float16")
RANGE = {"float16": float(torch.finfo(torch.float16).max), "bfloat16": float(torch.finfo(torch.bfloat16).max),
         "float32": float(torch.finfo(torch.float32).max)}

# numerics findings are about the dtype the model is served in: config.json declares it
TORCH_DTYPE = config_key("torch_dtype")


@dataclass
class DtypeResult:
    dtype: str
    nonfinite_logits: int
    first_nonfinite: dict | None      # {"layer", "module"} of the first NaN/Inf activation
    peak: float                        # largest finite |activation| (any hook point)
    peak_at: dict
    max_abs_logit: float
    mean_kl: float                     # KL(float32 || dtype) per position, averaged (nats)
    max_kl: float
    top1_agreement: float              # fraction of positions whose argmax matches float32
    max_abs_diff: float                # largest |logit - float32 logit|

    @property
    def finite(self) -> bool:
        return self.nonfinite_logits == 0 and self.first_nonfinite is None


def _peak(run: ForwardRun) -> tuple[float, dict]:
    points = [p for p in run.stats.points if p.module != "logits" and p.numel]
    if not points:
        return 0.0, {"layer": None, "module": None}
    best = max(points, key=lambda p: p.absmax)
    return best.absmax, {"layer": best.layer, "module": best.module}


def compare(dtype: str, ref: list[ForwardRun], runs: list[ForwardRun]) -> DtypeResult:
    kls, agree, total, diff, bad, first, peak, peak_at, top = [], 0, 0, 0.0, 0, None, 0.0, {}, 0.0
    for r32, r in zip(ref, runs):
        finite = torch.isfinite(r.logits)
        bad += int((~finite).sum())
        nonfinite_point = next((p for p in r.stats.points if p.nonfinite), None)
        if first is None and nonfinite_point is not None:
            first = {"layer": nonfinite_point.layer, "module": nonfinite_point.module, "probe": r.probe.label}
        p, at = _peak(r)
        if p > peak:
            peak, peak_at = p, {**at, "probe": r.probe.label}
        if not finite.all():
            continue
        top = max(top, float(r.logits.abs().max()))
        lp32 = torch.log_softmax(r32.logits.double(), -1)
        lp = torch.log_softmax(r.logits.double(), -1)
        kls += (lp32.exp() * (lp32 - lp)).sum(-1).clamp_min(0).tolist()
        agree += int((r32.logits.argmax(-1) == r.logits.argmax(-1)).sum())
        total += r.logits.shape[0]
        diff = max(diff, float((r32.logits - r.logits).abs().max()))
    nan = float("nan")
    return DtypeResult(dtype, bad, first, peak, peak_at, top, sum(kls) / len(kls) if kls else nan,
                       max(kls) if kls else nan, agree / total if total else 0.0, diff if total else nan)


def reference_runs(ctx) -> list[ForwardRun]:
    """float32 runs of the probes (the run's own engine when it is float32)."""
    if ctx.engine.dtype == torch.float32:
        return forward_runs(ctx)
    return [run_forward(_engine(ctx, "float32"), p) for p in probe_inputs(ctx)]


def _engine(ctx, dtype: str):
    from reference_engine.engine import Engine
    longest = max(len(p.ids) for p in probe_inputs(ctx))
    # a cache for one probe at a time: the default (room for 4 full contexts) would cost seconds to allocate
    return Engine.from_pretrained(ctx.model_dir, device=ctx.device, dtype=dtype, num_blocks=-(-longest // 16) + 2,
                                  streaming=ctx.engine.streaming)


def shadow_inputs(ctx) -> tuple[list, list[torch.dtype]]:
    """The probes run as low-precision shadows of a float32 engine (--quick: the first) and each one's dtype."""
    probes = probe_inputs(ctx)[:1 if ctx.quick else None]
    return probes * len(LOW_DTYPES), [getattr(torch, d) for d in LOW_DTYPES for _ in probes]


def shadow_part(ctx) -> Part | None:
    """The low-precision shadows as throwaway prefills riding on the shared passes (a float32 engine only: the
    other dtypes run on engines of their own, dtype_results)."""
    from reference_engine.streaming.sweep import LogitsRequest
    if ctx.engine.dtype != torch.float32:
        return None
    probes, dtypes = shadow_inputs(ctx)
    recorders = [StatsRecorder() for _ in probes]

    def store(ctx, logits, _):
        ctx.state[("shadows", ctx.quick)] = [ForwardRun(p, x.float().cpu(), r)
                                             for p, x, r in zip(probes, logits, recorders)]
    return Part([LogitsRequest(list(p.ids), r, d) for p, r, d in zip(probes, recorders, dtypes)], [], store)


SHADOWS = SharedRun("low-precision shadows", shadow_part)


def dtype_results(ctx) -> tuple[list[ForwardRun], list[DtypeResult]]:
    """float32 reference runs and one DtypeResult per low-precision dtype (cached; --quick: first probe).
    On a float32 engine the bfloat16/float16 runs are shadows: each layer's weights are cast as the pass
    reaches them (Engine.logits_many), so no second or third engine is built and, when streaming, every
    probe in every dtype costs one read of the weights."""
    if "numerics" not in ctx.state:
        ref = reference_runs(ctx)
        count = 1 if ctx.quick else len(ref)
        if ctx.engine.dtype == torch.float32:
            ctx.prepare_engine_runs()
            runs = ctx.state.get(("shadows", ctx.quick))          # the run's shared pass, when it holds them
            if runs is None:
                probes, dtypes = shadow_inputs(ctx)
                runs = run_forwards(ctx.engine, probes, dtypes)
            results = [compare(dtype, ref[:count], runs[k * count:(k + 1) * count])
                       for k, dtype in enumerate(LOW_DTYPES)]
        else:
            results = []
            for dtype in LOW_DTYPES:
                same = ctx.engine.dtype == getattr(torch, dtype)
                engine = ctx.engine if same else _engine(ctx, dtype)   # reuse the run's engine when it matches
                runs = [run_forward(engine, r.probe) for r in ref[:count]]
                results.append(compare(dtype, ref[:count], runs))
                del engine
        ctx.state["numerics"] = (ref, results)
    return ctx.state["numerics"]


def declared_dtype(ctx) -> str | None:
    raw = ctx.raw_config
    value = raw.get("torch_dtype") or raw.get("dtype")
    return value if value in RANGE else None


@check("NUM001", category="numerics", severity="error", needs=("engine", "tokenizer"),
       hint="Serve in bfloat16 or float32 (NUM003 names the safe dtype); do not run this checkpoint in float16.",
       shares=(FORWARD, SHADOWS))
def dtype_range(ctx):
    """Activations and logits fit the range of float16 (65504) and bfloat16.

    Runs the probes in float32 and records the largest |value| at every hook point (embedding, attention,
    MLP, residual stream, norms, logits), then runs them in float16 and bfloat16. A float32 peak past 65504,
    or non-finite values in the float16 run, means float16 inference overflows: the residual stream turns
    to inf, then NaN, and argmax of all-NaN logits is id 0 — the classic "the model only outputs !!!!"
    incident (vllm#14126, onnxruntime-genai PR#2444: 45,344 -> over 65,504 at layer 35; olmo-cookbook#60,
    Qwen3#868). The finding names the probe, layer and sub-module of the peak. It is an error when the
    model is declared (torch_dtype) or run (--dtype) in float16, a warning otherwise; a peak within 2x of
    the limit is noted as info.
    """
    ref, results = dtype_results(ctx)
    if not all(torch.isfinite(r.logits).all() for r in ref):
        raise Skip("the float32 run itself is not finite (GLD002/ACT002 name where)")
    peak, at = max((_peak(r) for r in ref), key=lambda x: x[0])
    fp16 = next(r for r in results if r.dtype == "float16")
    serving16 = declared_dtype(ctx) == "float16" or ctx.engine.dtype == torch.float16
    severity = "error" if serving16 else "warning"
    evidence = {"float32_peak": peak, "float32_peak_at": at, "float16_max": RANGE["float16"],
                "float16_nonfinite_logits": fp16.nonfinite_logits, "float16_first_nonfinite": fp16.first_nonfinite,
                "declared_dtype": declared_dtype(ctx)}
    where = f"layer {at['layer']} {at['module']}"
    if peak > RANGE["float16"] or not fp16.finite:
        first = fp16.first_nonfinite
        msg = (f"float16 overflows: peak |activation| {peak:.4g} at {where} in float32 exceeds 65504"
               if peak > RANGE["float16"] else "float16 run produces non-finite values")
        if first:
            msg += f"; float16 values first go non-finite at layer {first['layer']} {first['module']}"
        yield Problem(msg, evidence=evidence, severity=severity, location=TORCH_DTYPE)
    elif peak > RANGE["float16"] / 2:
        yield Problem(f"peak |activation| {peak:.4g} at {where} is within 2x of the float16 limit 65504",
                      evidence=evidence, severity="info", location=TORCH_DTYPE)
    bf16 = next(r for r in results if r.dtype == "bfloat16")
    if not bf16.finite:
        yield Problem("bfloat16 run produces non-finite values", severity="error",
                      evidence={"bfloat16_first_nonfinite": bf16.first_nonfinite}, location=TORCH_DTYPE)


@check("NUM002", category="numerics", severity="warning", needs=("engine", "tokenizer"),
       hint="Prefer the dtype NUM003 recommends; large divergence in bfloat16 points at outlier activations.",
       shares=(FORWARD, SHADOWS))
def dtype_divergence(ctx):
    """Logits in bfloat16 and float16 stay close to float32 (KL per position, top-1 agreement).

    For each low-precision dtype that stays finite: the mean and max KL(float32 || dtype) over the probe
    positions and the fraction of positions whose argmax agrees with float32. A trained model served in
    bfloat16 typically shows mean KL ~1e-3 and >= 95% agreement; mean KL above `max_mean_kl` (default 0.1
    nats) or agreement below `min_top1` (default 0.8) means outputs will visibly change with the dtype
    (transformers#25420 for how small differences compound over a generation).
    """
    _, results = dtype_results(ctx)
    max_kl = ctx.threshold("NUM002", "max_mean_kl", 0.1)
    min_top1 = ctx.threshold("NUM002", "min_top1", 0.8)
    for r in results:
        if not r.finite:
            continue  # NUM001 reports it
        if r.mean_kl > max_kl or r.top1_agreement < min_top1:
            yield Problem(f"{r.dtype} logits diverge from float32: mean KL {r.mean_kl:.3g} nats, top-1 agreement "
                          f"{r.top1_agreement:.0%}", evidence=vars(r), location=TORCH_DTYPE)


def recommend(results: list[DtypeResult], declared: str | None, max_kl: float, min_top1: float) -> str:
    safe = {r.dtype for r in results if r.finite and r.mean_kl <= max_kl and r.top1_agreement >= min_top1}
    if declared in safe:
        return declared
    for dtype in LOW_DTYPES:
        if dtype in safe:
            return dtype
    return "float32"


@check("NUM003", category="numerics", severity="info", needs=("engine", "tokenizer"),
       hint="Use the recommended dtype for serving (--dtype for llmdoctor's own engine checks).",
       shares=(FORWARD, SHADOWS))
def dtype_summary(ctx):
    """Per-dtype numerics table and the recommended safe dtype (info).

    One row per dtype: non-finite logits, peak |activation| and where, max |logit|, mean/max KL against
    float32, top-1 agreement. The recommendation is the declared torch_dtype when it is safe, else
    bfloat16, else float16, else float32 ("safe" = finite and within NUM002's thresholds).
    """
    ref, results = dtype_results(ctx)
    peak, at = max((_peak(r) for r in ref), key=lambda x: x[0])
    declared = declared_dtype(ctx)
    choice = recommend(results, declared, ctx.threshold("NUM002", "max_mean_kl", 0.1),
                       ctx.threshold("NUM002", "min_top1", 0.8))
    rows = [{"dtype": "float32", "nonfinite_logits": 0, "peak": peak, "peak_at": at,
             "max_abs_logit": max(float(r.logits.abs().max()) for r in ref), "mean_kl": 0.0, "max_kl": 0.0,
             "top1_agreement": 1.0}]
    rows += [{k: v for k, v in vars(r).items() if k not in ("first_nonfinite", "max_abs_diff")} for r in results]
    yield Problem(f"recommended dtype: {choice} (declared: {declared or 'none'}); " + ", ".join(
        f"{r.dtype} KL {r.mean_kl:.2g}" if r.finite else f"{r.dtype} non-finite" for r in results),
        evidence={"recommended": choice, "declared": declared, "table": rows},
        data={"plot": {"kind": "bar", "title": "peak |value| per dtype", "x": [r["dtype"] for r in rows],
                       "series": {"peak |activation|": [r["peak"] for r in rows]}, "y_scale": "log",
                       "hlines": {"float16 max": RANGE["float16"]}}}, location=TORCH_DTYPE)
