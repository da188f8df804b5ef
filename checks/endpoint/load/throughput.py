"""EPT10x: a live server under load. Latency and throughput per level, failed requests, where scaling stops,
latency and goodput jumps, and what the server's /metrics say (preemption storms, queueing).

These checks read what `llmdoctor probe load` measured (LoadInputs, checks/endpoint/load/inputs.py); they need
"load", so `check` and `probe endpoint` leave them out. Answers under load: checks/endpoint/load/answers.py.
"""
from __future__ import annotations

from checks.endpoint.load.inputs import LoadInputs
from checks.endpoint.load.plots import latency_plots
from checks.endpoint.load.server_metrics import preemptions, queue_share
from checks.catalogue.registry import Problem, Skip, check

JUMP = 4.0                 # a p50 TTFT/TPOT this many times the lowest load's is a latency jump
GOODPUT_OK, GOODPUT_BAD = 0.9, 0.5
SCALES, FALLS = 1.1, 0.8   # tokens/s ratio to the previous level: under 1.1x = stopped scaling, under 0.8x = falls
COLUMNS = ["level", "completed", "failed", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p99_ms",
           "e2e_p50_ms", "e2e_p99_ms", "output_tokens_per_s", "requests_per_s", "goodput", "peak_in_flight"]


def _rows(ctx: LoadInputs) -> list[dict]:
    rows = []
    for label, lv in zip(ctx.level_labels(), ctx.levels):
        rows.append({"level": label, "completed": lv["completed"], "failed": lv["failed"],
                     "ttft_p50_ms": lv["ttft_ms"]["p50"], "ttft_p99_ms": lv["ttft_ms"]["p99"],
                     "tpot_p50_ms": lv["tpot_ms"]["p50"], "itl_p99_ms": lv["itl_ms"]["p99"],
                     "e2e_p50_ms": lv["e2e_ms"]["p50"], "e2e_p99_ms": lv["e2e_ms"]["p99"],
                     "output_tokens_per_s": lv["output_tokens_per_s"], "requests_per_s": lv["requests_per_s"],
                     "goodput": lv["goodput"], "peak_in_flight": lv["peak_in_flight"]})
    return rows


@check("EPT101", category="endpoint", severity="info", needs=("load",),
       hint="size the deployment below the level where latency climbs; compare runs before and after a change")
def load_levels(ctx: LoadInputs):
    """Latency and throughput at each load level (the numbers and plots the other load findings stand on).

    Closed-loop levels keep `concurrency` requests open; open-loop levels send Poisson arrivals at `rate`/s. For
    each: TTFT, TPOT, ITL and end-to-end latency (p50/p90/p99, successful requests), output tokens/s,
    requests/s, goodput against --slo-ttft-ms/--slo-tpot-ms, errors. The plots show latency against load."""
    if not ctx.run.levels:
        raise Skip("no load level ran: " + "; ".join(f"{k}: {v}" for k, v in ctx.run.skipped.items()))
    rows = _rows(ctx)
    best = max(rows, key=lambda r: r["output_tokens_per_s"])
    evidence = {"levels": rows, "columns": COLUMNS, "max_tokens": ctx.options.max_tokens,
                "slo_ttft_ms": ctx.options.slo_ttft_ms, "slo_tpot_ms": ctx.options.slo_tpot_ms,
                "metrics": _metrics_note(ctx), "skipped": ctx.run.skipped or None}
    yield Problem(f"{len(rows)} load level(s); best {best['output_tokens_per_s']:.1f} output tokens/s at "
                  f"{best['level']} (TTFT p50 {best['ttft_p50_ms']} ms)", evidence=evidence,
                  data={"plots": latency_plots(ctx)})


def _metrics_note(ctx: LoadInputs) -> str:
    if ctx.run.scrapes:
        from probes.load.metrics import server_family
        family = server_family(ctx.run.scrapes[-1].values) or "unknown"
        return f"{len(ctx.run.scrapes)} scrapes of /metrics ({family} metric names)"
    return f"no /metrics ({ctx.run.metrics_error or 'not scraped'})"


@check("EPT102", category="endpoint", severity="error", needs=("load",),
       hint="read the server log at these times; for dropped streams check request interruption/abort settings "
            "(llama-cpp-python: --interrupt_requests false) and proxy idle timeouts")
def failed_requests(ctx: LoadInputs):
    """Requests the server failed under load: 5xx, dropped streams, timeouts, broken connections.

    A dropped stream ends (even with `data: [DONE]`) without a finish_reason: the client got a truncated answer
    and was not told. llama-cpp-python's default interrupt_requests=True does this to concurrent streams. 5xx,
    dropped streams and broken connections are errors; timeouts alone are a warning (raise --timeout or lower
    the load)."""
    totals: dict[str, int] = {}
    per_level = []
    for label, lv in zip(ctx.level_labels(), ctx.levels):
        errors = lv["errors"]
        per_level.append({"level": label, **errors, "examples": "; ".join(lv.get("error_examples", []))})
        for k, v in errors.items():
            totals[k] = totals.get(k, 0) + v
    from probes.load.types import Level
    if ctx.run.background:
        from probes.load.stats import errors as count_errors
        bg = count_errors(Level(concurrency=ctx.run.background_workers, samples=ctx.run.background))
        per_level.append({"level": "background (correctness phase)", **bg, "examples": ""})
        for k, v in bg.items():
            totals[k] = totals.get(k, 0) + v
    if not totals.get("total"):
        yield Problem("no failed request under load", severity="info", evidence={"levels": per_level})
        return
    parts = [f"{totals[k]} {name}" for k, name in (("http_5xx", "5xx responses"), ("dropped_streams",
             "dropped streams (no finish_reason)"), ("timeouts", "timeouts"), ("transport", "connection errors"),
             ("http_4xx", "4xx responses")) if totals.get(k)]
    sent = sum(lv["requests"] for lv in ctx.levels) + len(ctx.run.background)
    severe = totals.get("http_5xx", 0) + totals.get("dropped_streams", 0) + totals.get("transport", 0)
    yield Problem(f"under load the server failed {totals['total']} of {sent} requests: {', '.join(parts)}",
                  severity="error" if severe else "warning", evidence={"totals": totals, "levels": per_level})


def _closed(ctx: LoadInputs) -> list[tuple[str, dict]]:
    return [(label, lv) for label, lv in zip(ctx.level_labels(), ctx.levels) if "concurrency" in lv]


@check("EPT103", category="endpoint", severity="warning", needs=("load",),
       hint="the server is saturated past this level: add replicas or slots (llama.cpp --parallel, vLLM "
            "--max-num-seqs) or keep traffic under it")
def throughput_scaling(ctx: LoadInputs):
    """Throughput that stops scaling while latency climbs (a knee), or falls as load grows (a cliff).

    Over the concurrency levels: the first level that no higher one beats by 10 % in output tokens/s, while
    the highest level's p50 end-to-end latency is 1.5x its own, is the saturation knee (info: requests queue);
    tokens/s falling by a fifth from one level to the next while latency climbs is a throughput cliff
    (warning: the server does worse work when busier, e.g. preemption or recomputation)."""
    levels = [(label, lv) for label, lv in _closed(ctx) if lv["completed"] and lv["e2e_ms"]["p50"]]
    if len(levels) < 2:
        raise Skip("needs two concurrency levels with completed requests")
    steps = []
    for (la, a), (lb, b) in zip(levels, levels[1:]):
        tps = b["output_tokens_per_s"] / max(a["output_tokens_per_s"], 1e-9)
        lat = b["e2e_ms"]["p50"] / max(a["e2e_ms"]["p50"], 1e-9)
        steps.append({"from": la, "to": lb, "tokens_per_s_ratio": round(tps, 3), "e2e_p50_ratio": round(lat, 3)})
    evidence = {"steps": steps}
    cliff = next((s for s in steps if s["tokens_per_s_ratio"] < FALLS and s["e2e_p50_ratio"] > 1.2), None)
    if cliff:
        yield Problem(f"throughput cliff: output tokens/s fell to {cliff['tokens_per_s_ratio']:.2f}x from "
                      f"{cliff['from']} to {cliff['to']} while p50 latency grew {cliff['e2e_p50_ratio']:.1f}x",
                      evidence=evidence)
        return
    knee = _knee(levels)
    if knee:
        at, last, gain, slower = knee
        yield Problem(f"throughput stops scaling at {at}: up to {last} gives at most {gain:.2f}x its tokens/s "
                      f"for {slower:.1f}x the p50 latency (requests queue)", severity="info", evidence=evidence)
        return
    yield Problem("throughput grows with load across the levels measured", severity="info", evidence=evidence)


def _knee(levels: list[tuple[str, dict]]):
    """The first level no higher level beats by SCALES in tokens/s while the highest level's p50 e2e latency
    is 1.5x its own: (label, highest label, best tokens/s ratio, latency ratio) or None."""
    for i, (label, lv) in enumerate(levels[:-1]):
        later = [b for _, b in levels[i + 1:]]
        gain = max(b["output_tokens_per_s"] for b in later) / max(lv["output_tokens_per_s"], 1e-9)
        slower = later[-1]["e2e_ms"]["p50"] / max(lv["e2e_ms"]["p50"], 1e-9)
        if gain < SCALES and slower > 1.5:
            return label, levels[-1][0], gain, slower
    return None


@check("EPT104", category="endpoint", severity="warning", needs=("load",),
       hint="find the level where latency jumps (EPT101's plot) and size the deployment below it; check "
            "EPT105/EPT106 for why (preemption, queueing)")
def latency_jump(ctx: LoadInputs):
    """Goodput collapse against the SLOs, or a several-fold TTFT/TPOT jump from the lowest to a higher load.

    Goodput is the share of requests that finished within --slo-ttft-ms and --slo-tpot-ms: from 90 % or more
    at the lowest load to under half at a higher one is a collapse. Without SLOs, a p50 TTFT or TPOT at
    4x the lowest level's or more is the jump users feel."""
    levels = [(label, lv) for label, lv in zip(ctx.level_labels(), ctx.levels) if lv["completed"]]
    if len(levels) < 2:
        raise Skip("needs two load levels with completed requests")
    (low_label, low), rest = levels[0], levels[1:]
    problems = []
    if low["goodput"] is not None and low["goodput"] >= GOODPUT_OK:
        for label, lv in rest:
            if lv["goodput"] is not None and lv["goodput"] < GOODPUT_BAD:
                problems.append(f"goodput collapses from {low['goodput']:.0%} at {low_label} to "
                                f"{lv['goodput']:.0%} at {label}")
                break
    for metric, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        base = low[metric]["p50"]
        if not base:
            continue
        jumps = [(label, lv[metric]["p50"] / base) for label, lv in rest if lv[metric]["p50"]]
        label, ratio = max(jumps, key=lambda j: j[1], default=(None, 0.0))
        if ratio >= JUMP:
            problems.append(f"p50 {name} {ratio:.1f}x from {low_label} ({base:.0f} ms) to {label}")
    evidence = {"levels": [{"level": label, "ttft_p50_ms": lv["ttft_ms"]["p50"], "tpot_p50_ms": lv["tpot_ms"]["p50"],
                            "goodput": lv["goodput"]} for label, lv in levels]}
    if problems:
        yield Problem("latency under load: " + "; ".join(problems), evidence=evidence)
    else:
        yield Problem(f"no goodput collapse or {JUMP:g}x latency jump across the levels", severity="info",
                      evidence=evidence)


@check("EPT105", category="endpoint", severity="warning", needs=("load",),
       hint="the KV cache is too small for this load: lower max concurrency (vLLM --max-num-seqs), raise "
            "--gpu-memory-utilization or shorten max tokens; preempted requests are recomputed")
def preemption_storm(ctx: LoadInputs):
    """Preemption storm in the server's /metrics: preemptions rising with KV usage near 1 and the queue growing.

    vLLM (vllm:num_preemptions_total, vllm:kv_cache_usage_perc, vllm:num_requests_waiting) and SGLang
    (sglang:num_retracted_reqs, sglang:token_usage, sglang:num_queue_reqs) say when a full KV cache forces
    them to evict running requests and recompute them later: throughput and tail latency collapse."""
    found = preemptions(ctx.run.scrapes)
    if found is None:
        raise Skip("the server exposes no preemption metric" if ctx.run.scrapes else _metrics_note(ctx))
    if found["preemptions"] <= 0:
        yield Problem("no preemption during the run", severity="info", evidence=found)
    elif found["storm"]:
        yield Problem(f"preemption storm: {found['preemptions']:g} preemptions during the run with KV cache "
                      f"usage up to {found['kv_usage_max']:.0%} and up to {found['waiting_max']:g} requests "
                      f"waiting", evidence=found)
    else:
        yield Problem(f"{found['preemptions']:g} preemptions during the run (KV usage up to "
                      f"{found['kv_usage_max']:.0%})", severity="info", evidence=found)


@check("EPT106", category="endpoint", severity="warning", needs=("load",),
       hint="requests wait for a batch slot, not for compute: add slots or replicas, or admit fewer requests")
def queueing(ctx: LoadInputs):
    """Queueing dominating TTFT: the server's own queue time against the TTFT clients measured.

    From the queue-time histogram (vllm:request_queue_time_seconds, tgi_request_queue_duration,
    sglang:queue_time_seconds) per level: queue time over half of the mean client TTFT is a warning. llama.cpp
    has no queue histogram; its llamacpp:requests_deferred says requests waited for a free slot."""
    rows = queue_share(ctx.run.scrapes, ctx.run.levels, ctx.levels)
    if rows is None:
        raise Skip("the server exposes no queue metric" if ctx.run.scrapes else _metrics_note(ctx))
    heavy = [r for r in rows if r.get("queue_share") is not None and r["queue_share"] > 0.5]
    if heavy:
        worst = max(heavy, key=lambda r: r["queue_share"])
        yield Problem(f"queueing dominates TTFT at {worst['level']}: {worst['queue_ms']:.0f} ms of the "
                      f"{worst['client_ttft_ms']:.0f} ms mean TTFT is server queue time "
                      f"({worst['queue_share']:.0%})", evidence={"levels": rows})
        return
    deferred = [r for r in rows if r.get("deferred_max")]
    if deferred:
        yield Problem(f"requests waited for a free slot at {', '.join(r['level'] for r in deferred)} "
                      f"(llamacpp:requests_deferred up to {max(r['deferred_max'] for r in deferred):g})",
                      severity="info", evidence={"levels": rows})
        return
    if any(r.get("queue_share") is not None for r in rows):
        yield Problem("server queue time is a small part of TTFT", severity="info", evidence={"levels": rows})
    else:
        yield Problem("no request waited in the server's queue", severity="info", evidence={"levels": rows})
