"""One KV-cache simulation: a workload driven through the engine's own PagedKVCache and BlockAllocator.

The scheduler model is continuous batching in ticks of `tick_tokens` decode steps:
  1. sequences that finished in the previous tick free their blocks;
  2. arrivals join the waiting queue;
  3. FIFO admission: the head is prefilled (cache.allocate(prompt)) while it fits, else it waits
     (an "admission refused" for that request, counted once);
  4. every sequence admitted before this tick appends min(tick_tokens, remaining) tokens (cache.append);
     when the pool is full the youngest running sequence is preempted (vLLM's RECOMPUTE: its blocks are
     freed and it is re-prefilled with prompt + generated tokens when readmitted);
  5. every `sample_every` ticks the occupancy is recorded, and compaction is tried when its policy fires.
No forward pass runs: the pools are one element wide, so allocation, block tables, compaction and
validation are the engine's code at full speed. A contiguous max-length reservation (static batching)
is the same simulation with block_size = max length: one block per sequence, reserved up front.
"""
from __future__ import annotations

import operator
import statistics
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from reference_engine.core.cache.kv_cache import CacheFullError, PagedKVCache

from probes.kv_workload import Request


class BookkeepingCache(PagedKVCache):
    """The engine's PagedKVCache with 1x1 pools; only the slot-address tensor for attention is skipped."""

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_layers=1, num_blocks=num_blocks, block_size=block_size, num_kv_heads=1, head_dim=1)

    def slots(self, seq_id, start: int, end: int):  # addresses are only needed by a forward pass
        return None


@dataclass(frozen=True)
class SimConfig:
    block_size: int
    num_blocks: int
    label: str = ""
    tick_tokens: int = 16          # decode steps per scheduler tick
    step_s: float = 0.025          # seconds per decode step
    samples: int = 200             # occupancy samples over the run
    max_running: int = 256         # batch limit (vLLM's max_num_seqs)
    compaction: bool = True
    compact_free_below: float = 0.10   # the page-table pressure rule: free blocks < 10% ...
    compact_blocks_per_seq: float = 5  # ... and most sequences hold > 5 blocks
    compact_scatter_above: float = 0.5 # or live sequences' block runs are mostly broken
    compact_cooldown: int = 10         # samples between two compactions
    max_compactions: int = 5           # compactions performed (and measured); later triggers are only counted
    cross_check: bool = False          # also compare each sample with the engine's cache.stats() (tests)

    @property
    def tick_s(self) -> float:
        return self.tick_tokens * self.step_s


@dataclass
class SimResult:
    config: SimConfig
    timeline: dict[str, list] = field(default_factory=dict)   # name -> values per sample
    summary: dict = field(default_factory=dict)
    compactions: list[dict] = field(default_factory=list)
    validation: list[str] = field(default_factory=list)       # cache.validate() problems seen


TIMELINE_KEYS = ("t_s", "used_blocks", "free_blocks", "reserved_tokens", "live_tokens", "internal_fragmentation",
                 "fragmentation_ratio", "scatter_mean", "pool_span", "running", "waiting", "blocks_per_seq_p50",
                 "refused", "preemptions")


def simulate(requests: list[Request], config: SimConfig) -> SimResult:
    return _Sim(requests, config).run()


class _Sim:
    def __init__(self, requests: list[Request], config: SimConfig):
        self.cfg, self.requests = config, requests
        # A pool larger than every request at once behaves exactly like this one (the allocator hands out the
        # lowest free ids first, so the extra blocks are never touched); simulating only what can be reached
        # keeps O(pool) work (compaction, validation) proportional to the workload. Free counts stay nominal.
        reachable = 2 * sum(-(-r.total_tokens // config.block_size) for r in requests) + 1
        self.cache = BookkeepingCache(min(config.num_blocks, reachable), config.block_size)
        self.hidden_tail = config.num_blocks - self.cache.num_blocks
        self.result = SimResult(config, {k: [] for k in TIMELINE_KEYS})
        self.generated = [0] * len(requests)      # tokens produced so far (kept across preemption)
        self.admitted_tick: dict[int, int] = {}
        self.first_admit_s: dict[int, float] = {}
        self.running: dict[int, None] = {}         # insertion order = admission order
        self.waiting: deque[int] = deque()
        self.finished: list[int] = []
        self.refused: set[int] = set()
        self.preemptions = self.recomputed = self.rejected = 0
        self.last_compaction_sample = -10**9
        self.compaction_triggers: list[float] = []

    def run(self) -> SimResult:
        started = time.perf_counter()
        cfg, reqs = self.cfg, self.requests
        capacity = cfg.num_blocks * cfg.block_size
        last_arrival = reqs[-1].arrival_s if reqs else 0.0
        sample_every = max(1, int(last_arrival / cfg.tick_s) // max(cfg.samples, 1))
        tick, nxt, samples = 0, 0, 0
        while nxt < len(reqs) or self.running or self.waiting or self.finished:
            now = tick * cfg.tick_s
            self._release_finished()
            while nxt < len(reqs) and reqs[nxt].arrival_s <= now:
                if reqs[nxt].prompt_tokens + reqs[nxt].output_tokens > capacity:
                    self.rejected += 1            # can never fit, even in an empty pool
                else:
                    self.waiting.append(nxt)
                nxt += 1
            self._admit(tick, now)
            self._decode(tick)
            if tick % sample_every == 0:
                self._sample(now, samples)
                samples += 1
            tick += 1
            idle = not (self.running or self.waiting or self.finished)
            if idle and nxt < len(reqs) and reqs[nxt].arrival_s > tick * cfg.tick_s:
                tick = max(tick, int(reqs[nxt].arrival_s / cfg.tick_s))  # nothing to do until the next arrival
        self._finish(started, tick)
        return self.result

    def _release_finished(self) -> None:
        for seq in self.finished:
            self.cache.free(seq)
        self.finished = []

    def _admit(self, tick: int, now: float) -> None:
        while self.waiting and len(self.running) < self.cfg.max_running:
            seq = self.waiting[0]
            need = self.requests[seq].prompt_tokens + self.generated[seq]
            if not self.cache.can_allocate(need):
                self.refused.add(seq)
                return
            self.waiting.popleft()
            self.cache.allocate(seq, need)
            self.running[seq] = None
            self.admitted_tick[seq] = tick
            self.first_admit_s.setdefault(seq, now)
            if self.generated[seq] >= self.requests[seq].output_tokens:
                self._complete(seq)

    def _decode(self, tick: int) -> None:
        for seq in list(self.running):
            if seq not in self.running or self.admitted_tick[seq] == tick:
                continue  # preempted below, or prefilled this tick
            n = min(self.cfg.tick_tokens, self.requests[seq].output_tokens - self.generated[seq])
            while seq in self.running:
                try:
                    self.cache.append(seq, n)
                except CacheFullError:
                    self._preempt(next(reversed(self.running)))
                    continue
                self.generated[seq] += n
                if self.generated[seq] >= self.requests[seq].output_tokens:
                    self._complete(seq)
                break

    def _complete(self, seq: int) -> None:
        del self.running[seq]
        self.finished.append(seq)

    def _preempt(self, seq: int) -> None:
        del self.running[seq]
        self.cache.free(seq)
        self.waiting.appendleft(seq)
        self.preemptions += 1
        self.recomputed += self.requests[seq].prompt_tokens + self.generated[seq]

    def _sample(self, now: float, index: int) -> None:
        cache, bs, line = self.cache, self.cfg.block_size, self.result.timeline
        used = cache.allocator.num_used
        live = sum(cache.lengths.values())
        per_seq = [len(t) for t in cache.tables.values()]
        scatter, span = _scatter_and_span(cache.tables.values())
        values = dict(t_s=round(now, 3), used_blocks=used, free_blocks=self.cfg.num_blocks - used,
                      reserved_tokens=used * bs, live_tokens=live, internal_fragmentation=used * bs - live,
                      fragmentation_ratio=(used * bs - live) / (used * bs) if used else 0.0,
                      scatter_mean=scatter, pool_span=span, running=len(self.running), waiting=len(self.waiting),
                      blocks_per_seq_p50=statistics.median(per_seq) if per_seq else 0,
                      refused=len(self.refused), preemptions=self.preemptions)
        for key in TIMELINE_KEYS:
            line[key].append(values[key])
        if self.cfg.cross_check:
            self._cross_check(values)
        if self.cfg.compaction and index - self.last_compaction_sample >= self.cfg.compact_cooldown:
            reason = self._compaction_reason(used, values["blocks_per_seq_p50"], scatter)
            if reason:
                self.compaction_triggers.append(round(now, 3))
                self.last_compaction_sample = index
                if len(self.result.compactions) < self.cfg.max_compactions:
                    self._compact(now, reason, scatter, span)

    def _cross_check(self, values: dict) -> None:
        stats = self.cache.stats()
        ours = (values["used_blocks"], values["internal_fragmentation"], values["live_tokens"], values["pool_span"])
        theirs = (stats.used_blocks, stats.internal_fragmentation, stats.tokens, stats.pool_span)
        if ours != theirs:
            self.result.validation.append(f"t={values['t_s']}: probe (used, fragmentation, tokens, span) {ours} "
                                          f"!= cache.stats() {theirs}")
        self.result.validation += self.cache.validate()

    def _compaction_reason(self, used: int, blocks_p50: float, scatter: float) -> str:
        free_frac = 1 - used / self.cfg.num_blocks
        if free_frac < self.cfg.compact_free_below and blocks_p50 > self.cfg.compact_blocks_per_seq:
            return f"free blocks {free_frac:.0%} < {self.cfg.compact_free_below:.0%} and median " \
                   f"{blocks_p50:g} blocks/sequence > {self.cfg.compact_blocks_per_seq:g}"
        if scatter > self.cfg.compact_scatter_above:
            return f"mean scatter {scatter:.2f} > {self.cfg.compact_scatter_above:.2f}"
        return ""

    def _compact(self, now: float, reason: str, scatter_before: float, span_before: int) -> None:
        run_before = largest_free_run(self.cache.allocator.ref_counts, self.hidden_tail)
        mapping = self.cache.compact()
        scatter_after, span_after = _scatter_and_span(self.cache.tables.values())
        problems = self.cache.validate()
        self.result.validation += problems
        self.result.compactions.append(dict(
            t_s=round(now, 3), reason=reason, moved_blocks=sum(1 for o, n in mapping.items() if o != n),
            live_blocks=len(mapping), scatter_before=round(scatter_before, 4), scatter_after=round(scatter_after, 4),
            pool_span_before=span_before, pool_span_after=span_after,
            largest_free_run_before=run_before,
            largest_free_run_after=largest_free_run(self.cache.allocator.ref_counts, self.hidden_tail)))

    def _finish(self, started: float, ticks: int) -> None:
        cfg, line = self.cfg, self.result.timeline
        reserved, live = sum(line["reserved_tokens"]), sum(line["live_tokens"])
        waits = [self.first_admit_s[s] - self.requests[s].arrival_s for s in self.first_admit_s]
        blocks = sorted(-(-r.total_tokens // cfg.block_size) for r in self.requests)
        self.result.validation += self.cache.validate()
        self.result.summary = dict(
            label=cfg.label, block_size=cfg.block_size, num_blocks=cfg.num_blocks, requests=len(self.requests),
            completed=len(self.first_admit_s), rejected_too_long=self.rejected, admissions_refused=len(self.refused),
            preemptions=self.preemptions, recomputed_tokens=self.recomputed, simulated_s=round(ticks * cfg.tick_s, 3),
            wall_s=round(time.perf_counter() - started, 3),
            peak_reserved_tokens=max(line["reserved_tokens"], default=0),
            mean_reserved_tokens=reserved / len(line["t_s"]) if line["t_s"] else 0.0,
            mean_live_tokens=live / len(line["t_s"]) if line["t_s"] else 0.0,
            waste_ratio=1 - live / reserved if reserved else 0.0,
            peak_fragmentation_ratio=max(line["fragmentation_ratio"], default=0.0),
            wait_p50_s=_pct(waits, 50), wait_p99_s=_pct(waits, 99),
            blocks_per_request_p50=_pct(blocks, 50), blocks_per_request_p90=_pct(blocks, 90),
            blocks_per_request_max=blocks[-1] if blocks else 0, blocks_per_request_histogram=histogram(blocks),
            compaction_triggers=len(self.compaction_triggers),
            first_compaction_triggers_s=self.compaction_triggers[:10], compactions=len(self.result.compactions),
            moved_blocks=sum(c["moved_blocks"] for c in self.result.compactions))


def _scatter_and_span(tables) -> tuple[float, int]:
    """Mean over sequences of breaks in the block run / (blocks - 1), and highest used block id + 1.
    (C-level map/sum: this runs on every sample, over every block of every live sequence.)"""
    total, counted, span = 0.0, 0, 0
    for table in tables:
        if table:
            span = max(span, max(table) + 1)
        if len(table) > 1:
            breaks = sum(map(operator.ne, table[1:], map((1).__add__, table[:-1])))
            total += breaks / (len(table) - 1)
            counted += 1
    return (total / counted if counted else 0.0), span


def largest_free_run(ref_counts: list[int], free_tail: int = 0) -> int:
    """Longest run of consecutive free blocks (what a contiguous allocator could still hand out);
    free_tail more free blocks follow the last one."""
    free = torch.tensor(ref_counts, dtype=torch.int32) == 0
    if not bool(free.any()):
        return free_tail
    edges = torch.diff(torch.cat([torch.zeros(1, dtype=torch.int8), free.to(torch.int8),
                                  torch.zeros(1, dtype=torch.int8)]))
    starts, ends = torch.nonzero(edges == 1).flatten(), torch.nonzero(edges == -1).flatten()
    lengths = ends - starts
    if bool(free[-1]):
        lengths[-1] += free_tail
    return int(lengths.max()) if free_tail == 0 or bool(free[-1]) else max(int(lengths.max()), free_tail)


BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, 50), (51, 100), (101, None))


def histogram(blocks: list[int]) -> dict[str, int]:
    """Requests per blocks-held bucket ("6-10": requests that end up holding 6 to 10 blocks)."""
    out = {}
    for low, high in BUCKETS:
        label = str(low) if high == low else (f"{low}-{high}" if high else f">{low - 1}")
        out[label] = sum(1 for b in blocks if b >= low and (high is None or b <= high))
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))])
