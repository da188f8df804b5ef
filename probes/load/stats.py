"""Numbers of a load level: latency percentiles, throughput, goodput against SLOs, errors by kind.

Definitions follow `vllm bench serve` / AIPerf: TTFT to the first text chunk; TPOT = (e2e - TTFT) / (output
tokens - 1) per request; ITL = gaps between text chunks, pooled over requests; e2e to the last byte. Output
tokens/s and requests/s are over the level's wall time; goodput is the share of the requests asked for that
finished and met every SLO given (None without an SLO). Latencies count successful requests only.
"""
from __future__ import annotations

import math

from probes.load.types import CANCELLED, CUT, DROPPED, FAILURES, HTTP_ERROR, OK, TIMEOUT, TRANSPORT, Level

PERCENTILES = (50, 90, 99)


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def spread_ms(values_s: list[float]) -> dict[str, float | None]:
    out = {}
    for q in PERCENTILES:
        value = percentile(values_s, q)
        out[f"p{q}"] = None if value is None else round(value * 1000, 3)
    return out


def errors(level: Level) -> dict[str, int]:
    counts = {"http_5xx": 0, "http_4xx": 0, "dropped_streams": 0, "timeouts": 0, "transport": 0}
    for s in level.samples:
        if s.outcome == HTTP_ERROR:
            counts["http_5xx" if (s.status or 500) >= 500 else "http_4xx"] += 1
        elif s.outcome == DROPPED:
            counts["dropped_streams"] += 1
        elif s.outcome == TIMEOUT:
            counts["timeouts"] += 1
        elif s.outcome == TRANSPORT:
            counts["transport"] += 1
    counts["total"] = sum(counts.values())
    return counts


def meets_slo(sample, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    if sample.outcome != OK:
        return False
    if slo_ttft_ms is not None and (sample.ttft_s is None or sample.ttft_s * 1000 > slo_ttft_ms):
        return False
    tpot = sample.tpot_s
    return slo_tpot_ms is None or tpot is None or tpot * 1000 <= slo_tpot_ms


def summarize(level: Level, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None) -> dict:
    """The JSON object of one level (docs/report-schema.md, `load.levels`)."""
    ok = [s for s in level.samples if s.outcome == OK]
    wall = max(level.wall_s, 1e-9)
    delivered = sum(s.output_tokens for s in level.samples if s.outcome in (OK, DROPPED, CANCELLED))
    goodput = None
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        asked = max(level.requests, 1)
        goodput = round(sum(meets_slo(s, slo_ttft_ms, slo_tpot_ms) for s in level.samples) / asked, 4)
    out = {"concurrency": level.concurrency} if level.rate is None else {"rate": level.rate}
    out.update({
        "requests": level.requests,
        "completed": len(ok),
        "failed": sum(1 for s in level.samples if s.outcome in FAILURES),
        "cancelled": sum(1 for s in level.samples if s.outcome == CANCELLED),
        "not_sent_or_cut": level.requests - len(level.samples) + sum(1 for s in level.samples if s.outcome == CUT),
        "wall_s": round(level.wall_s, 3),
        "ttft_ms": spread_ms([s.ttft_s for s in ok if s.ttft_s is not None]),
        "tpot_ms": spread_ms([s.tpot_s for s in ok if s.tpot_s is not None]),
        "itl_ms": spread_ms([gap for s in ok for gap in s.itl_s]),
        "e2e_ms": spread_ms([s.e2e_s for s in ok if s.e2e_s is not None]),
        "output_tokens_per_s": round(delivered / wall, 3),
        "requests_per_s": round(len(ok) / wall, 4),
        "goodput": goodput,
        "errors": errors(level),
        "peak_in_flight": level.peak_in_flight,
    })
    if level.rate is not None:
        out["delayed_arrivals"] = level.delayed_arrivals
    if level.cut_short:
        out["cut_short"] = True
    examples = [f"{s.prompt_id}: {s.error}" for s in level.samples if s.outcome in FAILURES][:3]
    if examples:
        out["error_examples"] = examples
    return out
