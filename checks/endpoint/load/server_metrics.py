"""What the server's /metrics scrapes say about a load run: preemptions and queue time, per server family
(names in probes/load/metrics.py SERVERS)."""
from __future__ import annotations

from probes.load.metrics import series, server_family
from probes.load.types import OK, Level, Scrape

KV_FULL = 0.9


def preemptions(scrapes: list[Scrape]) -> dict | None:
    """Preemptions during the run, KV usage and queue: None when the server has no preemption counter."""
    if not scrapes:
        return None
    family = server_family(scrapes[-1].values)
    counter = series(scrapes, family, "preemptions")
    if not counter:
        return None
    kv = [v for _, _, v in series(scrapes, family, "kv_usage")]
    waiting = [v for _, _, v in series(scrapes, family, "waiting")]
    count = counter[-1][2] - counter[0][2]
    growing = len(waiting) >= 2 and max(waiting[1:]) > waiting[0]      # the queue grew during the run
    kv_max = max(kv) if kv else None
    storm = count > 0 and kv_max is not None and kv_max >= KV_FULL and bool(waiting) and max(waiting) > 0 and growing
    rising = [{"t": t, "phase": phase, "preemptions": v} for t, phase, v in counter]
    return {"server": family, "preemptions": count, "kv_usage_max": kv_max,
            "waiting_max": max(waiting) if waiting else None, "queue_growing": growing, "storm": storm,
            "counter": rising[:: max(len(rising) // 20, 1)]}


def queue_share(scrapes: list[Scrape], levels: list[Level], summaries: list[dict]) -> list[dict] | None:
    """Per level: mean server queue time (histogram delta) vs mean client TTFT, or the deferred-request peak."""
    if not scrapes:
        return None
    family = server_family(scrapes[-1].values)
    sums = series(scrapes, family, "queue_time", "_sum")
    counts = series(scrapes, family, "queue_time", "_count")
    waiting = series(scrapes, family, "waiting")
    if not (sums and counts) and not waiting:
        return None
    rows = []
    for level, summary in zip(levels, summaries):
        ttfts = [s.ttft_s for s in level.samples if s.outcome == OK and s.ttft_s is not None]
        row = {"level": level.label, "client_ttft_ms": round(1000 * sum(ttfts) / len(ttfts), 3) if ttfts else None}
        if sums and counts:
            d_sum, d_count = _delta(sums, level.label), _delta(counts, level.label)
            if d_count and row["client_ttft_ms"]:
                row["queue_ms"] = round(1000 * d_sum / d_count, 3)
                row["queue_share"] = round(row["queue_ms"] / row["client_ttft_ms"], 4)
        in_phase = [v for _, phase, v in waiting if phase == level.label]
        if in_phase:
            row["waiting_max"] = max(in_phase)
            if family == "llama.cpp":
                row["deferred_max"] = max(in_phase)
        rows.append(row)
    return rows


def _delta(points: list[tuple[float, str, float]], phase: str) -> float:
    """Increase of a counter over one phase: from the last value before it to the last value in it."""
    before, last = None, None
    for _, p, value in points:
        if p == phase:
            last = value
        elif last is None:
            before = value
    if last is None:
        return 0.0
    return last - (before if before is not None else 0.0)
