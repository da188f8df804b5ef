"""Plot data for EPT101 (docs/report-schema.md "Plot data"): latency against load, throughput against load and,
when the server has /metrics, its running and waiting requests over time."""
from __future__ import annotations

from probes.load.metrics import series, server_family


def latency_plots(ctx) -> list[dict]:
    levels, labels = ctx.levels, ctx.level_labels()
    closed = all("concurrency" in lv for lv in levels)
    x = [lv["concurrency"] for lv in levels] if closed else labels
    x_label = "concurrency (requests in flight)" if closed else "load level"
    latency = {f"{name} {q}": [lv[key][q] for lv in levels]
               for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("e2e", "e2e_ms")) for q in ("p50", "p99")}
    plots = [{"kind": "line", "title": "latency against load", "x": x, "series": latency, "x_label": x_label,
              "y_label": "ms", "y_scale": "log" if _positive(latency) else "linear"},
             {"kind": "line", "title": "throughput against load", "x": x, "x_label": x_label,
              "series": {"output tokens/s": [lv["output_tokens_per_s"] for lv in levels]}, "y_label": "tokens/s"}]
    scrapes = ctx.run.scrapes
    if len(scrapes) >= 2:
        family = server_family(scrapes[-1].values)
        found = {role: series(scrapes, family, role) for role in ("running", "waiting")}
        if any(found.values()):
            times = [s.t for s in scrapes]
            lookup = {role: {t: v for t, _, v in points} for role, points in found.items()}
            plots.append({"kind": "line", "title": f"server requests over time ({family} /metrics)", "x": times,
                          "series": {role: [lookup[role].get(t) for t in times] for role in found if found[role]},
                          "x_label": "seconds", "y_label": "requests"})
    return plots


def _positive(series_by_name: dict) -> bool:
    values = [v for vs in series_by_name.values() for v in vs if v is not None]
    return bool(values) and all(v > 0 for v in values)
