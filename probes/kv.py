"""`llmdoctor probe kv`: KV-cache fragmentation of a workload, per block size, vs a contiguous reservation.

Runs the same workload through kv_sim for each block size (default 1, 16, 256: one token per block up to
large pages) and for a contiguous max-length reservation, on a pool of the same size, and turns the comparison into
findings
(category kv_cache) with an occupancy-over-time plot. `--with-model` sizes the pool from the model's KV
bytes per token and a memory budget, so the numbers are bytes of this model, not abstract slots.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from findings import Finding

from probes.kv_sim import SimConfig, SimResult, simulate
from probes.kv_workload import Request

DEFAULT_BLOCK_SIZES = (1, 16, 256)
ENGINE_BLOCK_SIZE = 16           # Engine.from_pretrained's default
MAX_POOL_TOKENS = 1 << 20        # bookkeeping cost grows with the pool: 1M token slots is plenty
DEFAULT_KV_BUDGET = 4 << 30      # bytes of KV memory simulated with --with-model and no --memory-budget
DEFAULT_POOL_TOKENS = 262144     # pool of a run without a model (token slots; a token has no size there)


@dataclass(frozen=True)
class ModelKv:
    """What a model's KV cache costs: bytes per token over all layers, K and V; a hybrid's recurrent layers add
    a state per sequence whatever its length (state_bytes_per_sequence, float32)."""
    name: str
    bytes_per_token: int
    max_position_embeddings: int
    dtype: str
    state_bytes_per_sequence: int = 0

    @classmethod
    def from_dir(cls, model_dir: str | Path, dtype: str | None = None) -> "ModelKv":
        from reference_engine.config import load_config
        from reference_engine.core.engine import resolve_dtype
        from reference_engine.core.families import kv_bytes_per_token, state_bytes
        config = load_config(model_dir)
        name = dtype or _config_dtype(config) or "bfloat16"
        per_token = kv_bytes_per_token(config, resolve_dtype(name))   # the family's layout (MLA: latent + rope key)
        return cls(str(model_dir), per_token, config.max_position_embeddings, name, state_bytes(config))


def _config_dtype(config) -> str | None:
    value = getattr(config, "torch_dtype", None)
    return value if value in ("float32", "bfloat16", "float16") else None


@dataclass
class KvProbeResult:
    workload: str
    pool_tokens: int
    max_len: int
    bytes_per_token: int | None
    runs: list[SimResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    state_bytes_per_sequence: int = 0      # a hybrid's recurrent state, held by every running sequence

    def run(self, label: str) -> SimResult:
        return next(r for r in self.runs if r.config.label == label)

    @property
    def paged(self) -> list[SimResult]:
        return [r for r in self.runs if r.config.label != "contiguous"]


def run_kv_probe(requests: list[Request], workload: str, *, pool_tokens: int, max_len: int,
                 block_sizes=DEFAULT_BLOCK_SIZES, bytes_per_token: int | None = None, tick_tokens: int = 16,
                 step_s: float = 0.025, samples: int = 200, max_running: int = 256,
                 state_bytes_per_sequence: int = 0) -> KvProbeResult:
    notes = []
    if pool_tokens > MAX_POOL_TOKENS:
        notes.append(f"pool of {pool_tokens} tokens capped at {MAX_POOL_TOKENS} for the simulation")
        pool_tokens = MAX_POOL_TOKENS
    if pool_tokens < max_len:
        notes.append(f"the pool ({pool_tokens} tokens) cannot hold one max-length sequence ({max_len})")
    result = KvProbeResult(workload, pool_tokens, max_len, bytes_per_token, notes=notes,
                           state_bytes_per_sequence=state_bytes_per_sequence)
    common = dict(tick_tokens=tick_tokens, step_s=step_s, samples=samples, max_running=max_running)
    for bs in sorted(set(block_sizes)):
        config = SimConfig(bs, max(1, pool_tokens // bs), label=f"block {bs}", **common)
        result.runs.append(simulate(requests, config))
    contiguous = SimConfig(max_len, max(1, pool_tokens // max_len), label="contiguous", compaction=False, **common)
    fits = [r for r in requests if r.total_tokens <= max_len] if pool_tokens >= max_len else []
    baseline = simulate(fits, contiguous)
    baseline.summary["requests"] = len(requests)
    baseline.summary["rejected_too_long"] = len(requests) - len(fits)
    result.runs.append(baseline)
    return result


# ---------------------------------------------------------------- findings


def kv_findings(result: KvProbeResult) -> list[Finding]:
    return [occupancy_finding(result), comparison_finding(result), pressure_finding(result),
            seed_rule_finding(result), compaction_finding(result)]


def _bytes(result: KvProbeResult, tokens: float) -> dict:
    return {"bytes": int(tokens * result.bytes_per_token)} if result.bytes_per_token else {}


def _best(result: KvProbeResult) -> SimResult:
    return min(result.paged, key=lambda r: (r.summary["waste_ratio"], r.config.block_size))


def aligned(runs: list[SimResult], key: str) -> tuple[list[float], dict[str, list]]:
    """The runs' timelines of `key` on the union of their sample times (a run's last sample is carried
    forward until its next one; None outside its time range), so runs can share one chart."""
    xs = sorted({t for r in runs for t in r.timeline["t_s"]})
    series = {}
    for run in runs:
        times, values = run.timeline["t_s"], run.timeline[key]
        out, i = [], -1
        for t in xs:
            while i + 1 < len(times) and times[i + 1] <= t:
                i += 1
            out.append(values[i] if i >= 0 and t <= times[-1] else None)
        series[run.config.label] = out
    return xs, series


def occupancy_finding(result: KvProbeResult) -> Finding:
    best, contiguous = _best(result), result.run("contiguous")
    engine = next((r for r in result.paged if r.config.block_size == ENGINE_BLOCK_SIZE), best)
    xs, reserved = aligned(result.runs, "reserved_tokens")
    _, live = aligned([engine], "live_tokens")
    _, waiting = aligned([engine, contiguous], "waiting")
    plots = [{"kind": "line", "title": "KV tokens reserved over time, per allocation", "x": xs,
              "series": {f"live tokens ({engine.config.label})": live[engine.config.label], **reserved},
              "x_label": "time (s)", "y_label": "tokens", "hlines": {"pool": result.pool_tokens}},
             {"kind": "line", "title": "requests waiting for KV memory", "x": xs, "series": waiting,
              "x_label": "time (s)", "y_label": "requests"}]
    s, line = engine.summary, engine.timeline
    return Finding("KVC901", "kv_cache", "info",
                   f"{result.workload.split(':')[0]} workload of {s['requests']} requests: "
                   f"peak {s['peak_reserved_tokens']} "
                   f"of {result.pool_tokens} pool tokens reserved with {engine.config.label} "
                   f"({s['waste_ratio']:.1%} of reserved slots unused)" + _state_note(result),
                   evidence={"workload": result.workload, "pool_tokens": result.pool_tokens, "max_len": result.max_len,
                             "bytes_per_token": result.bytes_per_token, "notes": result.notes,
                             "state_bytes_per_sequence": result.state_bytes_per_sequence,
                             "last_sample": {k: line[k][-1] if line[k] else None for k in line}},
                   hint="", data={"plots": plots})


def _state_note(result: KvProbeResult) -> str:
    if not result.state_bytes_per_sequence:
        return ""
    return (f"; plus {result.state_bytes_per_sequence} bytes of recurrent state per running sequence, "
            "constant in its length")


def comparison_finding(result: KvProbeResult) -> Finding:
    rows = {r.config.label: _row(result, r) for r in result.runs}
    best, contiguous = _best(result), result.run("contiguous")
    # reserved slots per live token: 1 / (1 - waste). Comparing per live token keeps the saving honest when the
    # contiguous baseline is starved (it then holds fewer sequences, not less memory per sequence).
    saving = 1 - (1 - contiguous.summary["waste_ratio"]) / (1 - best.summary["waste_ratio"])
    c = contiguous.summary
    if c["completed"] == 0:
        saving = 1.0  # nothing fits a max-length reservation: paging is the only way to serve this pool
    engine = next((r for r in result.paged if r.config.block_size == ENGINE_BLOCK_SIZE), best)
    severity = "warning" if engine.summary["waste_ratio"] > best.summary["waste_ratio"] + 0.10 else "info"
    plot = {"kind": "bar", "title": "unused share of reserved KV slots (time-averaged)", "x": list(rows),
            "series": {"waste %": [round(100 * r["waste_ratio"], 2) for r in rows.values()]},
            "x_label": "allocation", "y_label": "% of reserved slots unused"}
    return Finding("KVC902", "kv_cache", severity,
                   f"paging ({best.config.label}) reserves {saving:.0%} less KV memory per live token than a "
                   "contiguous "
                   f"{result.max_len}-token reservation for this workload; {best.config.label} wastes least "
                   f"({best.summary['waste_ratio']:.1%}), " + (
                       f"contiguous wastes {c['waste_ratio']:.1%} and, on the same pool, refused "
                       f"{c['admissions_refused']} admissions (queue wait p99 {c['wait_p99_s']:.1f}s)"
                       if c["completed"] else f"and not one {result.max_len}-token reservation fits the pool"),
                   evidence={"saving_vs_contiguous": round(saving, 4), "best": best.config.label, "runs": rows},
                   hint="" if severity == "info" else f"use block size {best.config.block_size}: the engine "
                        f"default {ENGINE_BLOCK_SIZE} wastes {engine.summary['waste_ratio']:.0%} of reserved slots "
                        "here",
                   data={"plot": plot})


def _row(result: KvProbeResult, run: SimResult) -> dict:
    s = run.summary
    keys = ("block_size", "num_blocks", "completed", "rejected_too_long", "admissions_refused", "preemptions",
            "recomputed_tokens", "peak_reserved_tokens", "mean_reserved_tokens", "mean_live_tokens", "waste_ratio",
            "peak_fragmentation_ratio", "wait_p50_s", "wait_p99_s", "blocks_per_request_p50",
            "blocks_per_request_p90", "blocks_per_request_max", "simulated_s", "wall_s")
    row = {k: round(s[k], 4) if isinstance(s[k], float) else s[k] for k in keys}
    if result.bytes_per_token:
        row["peak_reserved_bytes"] = s["peak_reserved_tokens"] * result.bytes_per_token
    return row


def pressure_finding(result: KvProbeResult) -> Finding:
    engine = next((r for r in result.paged if r.config.block_size == ENGINE_BLOCK_SIZE), _best(result))
    s = engine.summary
    refused_frac = s["admissions_refused"] / s["requests"] if s["requests"] else 0.0
    bad = refused_frac > 0.01 or s["preemptions"] > 0 or s["rejected_too_long"] > 0
    evidence = {k: s[k] for k in ("requests", "admissions_refused", "preemptions", "recomputed_tokens",
                                  "rejected_too_long", "wait_p50_s", "wait_p99_s")}
    return Finding("KVC903", "kv_cache", "warning" if bad else "info",
                   f"{engine.config.label}: {s['admissions_refused']} admissions refused ({refused_frac:.1%}), "
                   f"{s['preemptions']} preemptions, {s['rejected_too_long']} requests larger than the pool; "
                   f"queue wait p99 {s['wait_p99_s']:.2f}s",
                   evidence=evidence,
                   hint="the pool is too small for this load: raise the KV memory budget, lower max_running, "
                        "or shed load before the queue grows" if bad else "")


def seed_rule_finding(result: KvProbeResult) -> Finding:
    """The page-table pressure rule: most sequences hold > 5 pages while free pages < 10% -> fragmentation."""
    hits = {}
    for run in result.paged:
        line, total = run.timeline, run.config.num_blocks
        flagged = [t for t, free, p50 in zip(line["t_s"], line["free_blocks"], line["blocks_per_seq_p50"])
                   if free < 0.10 * total and p50 > 5]
        if flagged:
            hits[run.config.label] = {"samples": len(flagged), "first_t_s": flagged[0]}
    labels = list(result.paged[0].summary["blocks_per_request_histogram"]) if result.paged else []
    plot = {"kind": "bar", "title": "blocks each request ends up holding (% of requests)", "x": labels,
            "series": {r.config.label: [round(100 * v / max(r.summary["requests"], 1), 2)
                                        for v in r.summary["blocks_per_request_histogram"].values()]
                       for r in result.paged},
            "x_label": "blocks per request", "y_label": "% of requests"}
    return Finding("KVC904", "kv_cache", "warning" if hits else "info",
                   f"page-table pressure (median > 5 blocks/sequence with < 10% free blocks) in "
                   f"{', '.join(hits) if hits else 'no run'}",
                   evidence={"runs": hits},
                   hint="latency creep then OOM follows: give the KV cache more memory or cap concurrency"
                   if hits else "", data={"plot": plot})


def compaction_finding(result: KvProbeResult) -> Finding:
    per_run = {}
    for run in result.paged:
        events = run.compactions
        moved = sum(e["moved_blocks"] for e in events)
        per_run[run.config.label] = {
            "compactions": len(events), "moved_blocks": moved,
            **({"moved_bytes": moved * run.config.block_size * result.bytes_per_token}
               if result.bytes_per_token else {}),
            "span_recovered_blocks": sum(e["pool_span_before"] - e["pool_span_after"] for e in events),
            "scatter_before_mean": round(sum(e["scatter_before"] for e in events) / len(events), 4) if events else 0.0,
            "first": events[0] if events else None, "validation": run.validation[:5]}
    problems = [p for run in result.paged for p in run.validation]
    total = sum(v["compactions"] for v in per_run.values())
    return Finding("KVC905", "kv_cache", "error" if problems else "info",
                   f"compaction triggered {total} times across block sizes; it restores contiguity (scatter -> 0) "
                   f"and trims the pool span but frees no capacity in a paged pool"
                   + (f"; cache invariants broken: {problems[0]}" if problems else ""),
                   evidence={"runs": per_run},
                   hint="a cache invariant broke after compaction: report this with the evidence" if problems else "")
