"""The engine runs the chosen checks know before any of them runs, riding on the passes the greedy traces make.

A streaming engine reads the whole model from disk on every pass (an 8B model: 15 GB), so a check run should
make as few passes as it can. Most engine checks ask for runs whose tokens the probes alone fix: the recorded
forward pass of every probe (GLD002, ACT*), its bfloat16/float16 shadows (NUM*), the probes with shifted norms
(CNV001), the self-tests' scripted steps (ENG001, ENG002) and the far-position check's (KVC003). The greedy
traces (GEN*, GLD003) need one pass per token (a step's token is known only once the step before it has run),
each computing a few rows while it reads everything. `prepare(ctx)`, called by each of those checks before its
own run, runs the traces and spreads all the other runs the chosen checks need over the traces' passes, as
lanes beside their steps (Rides): the run makes no pass beyond the traces', and the work rides where the
disk, not the CPU, sets the pace (the read-ahead thread reads the next layer while the lanes compute).

Each result is stored where its check looks first (ctx.state); a check that finds nothing there runs its own
pass, so a part left out (not chosen, no room in the KV cache, an error) costs time, never a different
result. On a resident engine nothing is prepared: there a pass costs no reads and every check runs as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field

DONE = "shared pass"
FORWARD = {"GLD002", "ACT001", "ACT002", "ACT003", "NUM001", "NUM002", "NUM003", "CNV001"}
SHADOWS = {"NUM001", "NUM002", "NUM003"}
GREEDY = {"GEN001", "GEN002", "GEN003", "GEN004", "GLD003"}
LANE_COST = 16           # tokens' worth of compute a lane costs whatever its length (job_cost)


@dataclass
class Part:
    """One check's share of the pass: its throwaway prefills, its scripts, and where its results go."""
    owners: set[str]
    requests: list = field(default_factory=list)      # sweep.LogitsRequest
    scripts: list = field(default_factory=list)       # scripted.Script
    store: object = None                              # callable(ctx, request logits, script results)


def prepare(ctx) -> None:
    """Run the shared passes once per check run, at the first engine check that asks (see the module doc)."""
    if DONE in ctx.state:
        return
    engine = ctx.engine                     # the asking check needs it anyway; building it may raise
    ctx.state[DONE] = False
    chosen = getattr(ctx, "selected", None)
    if not engine.streaming or not chosen:
        return
    greedy = bool(GREEDY & chosen)
    parts = fitting(ctx, [p for p in described(ctx) if p.owners & chosen], greedy)
    if not parts and not greedy:
        return
    from checks.analysis.probe_runs import run_traces
    from checks.analysis.prompts import new_tokens
    from reference_engine.budget.scripted import LiveStep
    rides = Rides(parts, new_tokens(ctx.quick) if greedy else 1)
    try:
        if greedy:
            run_traces(ctx, prefill=lambda seqs, ids: rides.run(engine, LiveStep(seqs, ids)),
                       decode=lambda seqs, ids: rides.run(engine, LiveStep(seqs, [[t] for t in ids], True)))
        rides.finish(engine, ctx)
    except Exception:       # every check whose part is missing runs its own pass and reports its own error
        return
    ctx.state[DONE] = True


class Rides:
    """The parts' requests and scripts spread over the passes the greedy traces make anyway (a prefill, then
    one decode step per token): those passes read the whole model for a few rows each, so the work riding on
    them is computed while the read-ahead thread reads (read_ahead.py) instead of in a pass of its own. Each
    request and each script is one job; the longest go first, each onto the pass with the least work so far.
    Jobs whose pass did not come (every trace ended early) run together in one more pass."""

    def __init__(self, parts: list[Part], passes: int):
        self.parts = parts
        jobs = [(k, "requests", j, r) for k, p in enumerate(parts) for j, r in enumerate(p.requests)] + \
               [(k, "scripts", j, s) for k, p in enumerate(parts) for j, s in enumerate(p.scripts)]
        self.batches: list[list] = [[] for _ in range(max(1, passes))]
        load = [0] * len(self.batches)
        for job in sorted(jobs, key=job_cost, reverse=True):
            k = load.index(min(load))
            self.batches[k].append(job)
            load[k] += job_cost(job)
        self.results = {(k, kind): [None] * len(getattr(p, kind)) for k, p in enumerate(parts)
                        for kind in ("requests", "scripts")}
        self.next = 0

    def run(self, engine, step=None):
        """One pass: the next batch of jobs beside `step` (the traces' prefill or decode step)."""
        batch = self.batches[self.next] if self.next < len(self.batches) else []
        self.next += 1
        requests = [job[3] for job in batch if job[1] == "requests"]
        scripts = [job[3] for job in batch if job[1] == "scripts"]
        logits, scripted, out = engine.run_pass(requests, scripts, step)
        done = iter(logits + scripted)
        for job in [j for j in batch if j[1] == "requests"] + [j for j in batch if j[1] == "scripts"]:
            self.results[(job[0], job[1])][job[2]] = next(done)
        return out

    def finish(self, engine, ctx) -> None:
        """Run what is left in one pass, then hand every part its results."""
        left = [job for batch in self.batches[self.next:] for job in batch]
        if left:
            self.batches, self.next = [left], 0
            self.run(engine)
        for k, p in enumerate(self.parts):
            p.store(ctx, self.results[(k, "requests")], self.results[(k, "scripts")])


def job_cost(job) -> int:
    """Tokens a job computes, plus a fixed cost per lane (a lane of a few rows reads every projection from
    memory once per layer, as a lane of a hundred does)."""
    _, kind, _, item = job
    if kind == "requests":
        return len(item.tokens) + LANE_COST
    return sum(len(t) for step in item.steps for t in step) + LANE_COST * len(item.steps)


# ---- the parts -------------------------------------------------------------------------------------------

def described(ctx) -> list[Part]:
    """Every part whose inputs can be made (a check that cannot make its own, e.g. no probe encodes, is left
    to report that itself)."""
    out = []
    for describe in (forward_part, shadow_part, norm_shift_part, paged_part, padded_part, far_part):
        try:
            part = describe(ctx)
        except Exception:
            continue
        if part is not None:
            out.append(part)
    return out


def forward_part(ctx) -> Part:
    from checks.analysis.probe_runs import ForwardRun, StatsRecorder
    from checks.analysis.prompts import probe_inputs
    from reference_engine.budget.sweep import LogitsRequest
    probes = probe_inputs(ctx)
    recorders = [StatsRecorder() for _ in probes]

    def store(ctx, logits, _):
        ctx.state[("forward", ctx.quick)] = [ForwardRun(p, x.float().cpu(), r)
                                             for p, x, r in zip(probes, logits, recorders)]
    return Part(FORWARD, [LogitsRequest(list(p.ids), r) for p, r in zip(probes, recorders)], [], store)


def shadow_part(ctx) -> Part | None:
    import torch

    from checks.analysis.probe_runs import ForwardRun, StatsRecorder
    from checks.numerics import shadow_inputs
    from reference_engine.budget.sweep import LogitsRequest
    if ctx.engine.dtype != torch.float32:
        return None                        # the other dtypes run on engines of their own (numerics.py)
    probes, dtypes = shadow_inputs(ctx)
    recorders = [StatsRecorder() for _ in probes]

    def store(ctx, logits, _):
        ctx.state[("shadows", ctx.quick)] = [ForwardRun(p, x.float().cpu(), r)
                                             for p, x, r in zip(probes, logits, recorders)]
    return Part(SHADOWS, [LogitsRequest(list(p.ids), r, d) for p, r, d in zip(probes, recorders, dtypes)],
                [], store)


def norm_shift_part(ctx) -> Part | None:
    """CNV001's probes under the other norm convention; their loss as stored comes from the forward part's
    logits (the same lanes)."""
    from checks.conversion import nll_texts, other_convention
    from reference_engine.budget.sweep import LogitsRequest, NormShift
    texts, shift = nll_texts(ctx), other_convention(ctx.engine.config)
    if not texts:
        return None

    def store(ctx, logits, _):
        forward = {tuple(r.probe.ids): r.logits for r in ctx.state.get(("forward", ctx.quick), [])}
        if all(tuple(t) in forward for t in texts):
            ctx.state[("norm_shift", shift)] = [forward[tuple(t)] for t in texts] + logits
    return Part({"CNV001"}, [LogitsRequest(t, variant=NormShift(shift)) for t in texts], [], store)


def _scripted(owner: str, scripts) -> Part:
    from checks.analysis.logit_compare import script_key

    def store(ctx, _, results):
        ctx.state.setdefault("scripted", {})[script_key(scripts)] = results
    return Part({owner}, [], scripts, store)


def paged_part(ctx) -> Part:
    from checks.analysis.logit_compare import incremental_scripts
    from checks.selftest import paged_inputs
    ids, prefill, chunk = paged_inputs(ctx)
    return _scripted("ENG001", incremental_scripts(ids, prefill, chunk, "all"))


def padded_part(ctx) -> Part | None:
    from checks.analysis.logit_compare import batched_scripts
    from checks.selftest import padded_rows
    rows, problems = padded_rows(ctx)
    return None if problems else _scripted("ENG002", batched_scripts(rows))


def far_part(ctx) -> Part | None:
    import torch

    from checks.analysis.logit_compare import incremental_scripts
    from checks.kv_cache import FAR_CHUNK, far_inputs
    if ctx.engine.dtype != torch.float32:
        return None                        # its recompute runs on a float32 engine of its own (kv_cache.py)
    ids, tail = far_inputs(ctx)
    return _scripted("KVC003", incremental_scripts(ids, len(ids) - tail, FAR_CHUNK, "last"))


def fitting(ctx, parts: list[Part], greedy: bool) -> list[Part]:
    """The parts whose scripts fit the engine's KV cache beside each other and the greedy traces (the largest
    is left to its own pass until they do: each check sized its run for the cache alone)."""
    from checks.analysis.prompts import new_tokens, probe_inputs
    cache = ctx.engine.cache
    block = cache.block_size
    blocks = lambda n: -(-n // block)                                               # noqa: E731
    need = {id(p): sum(blocks(sum(len(step[j]) for step in s.steps if j < len(step)))
                       for s in p.scripts for j in range(s.width)) for p in parts}
    room = cache.allocator.num_free - 1
    if greedy:
        try:
            room -= sum(blocks(len(p.ids) + new_tokens(ctx.quick)) for p in probe_inputs(ctx))
        except Exception:
            return []
    parts = sorted(parts, key=lambda p: need[id(p)])
    while parts and sum(need[id(p)] for p in parts) > room:
        parts.pop()
    return parts
