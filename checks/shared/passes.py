"""The engine runs the chosen checks know before any of them runs, riding on the passes the greedy traces make.

A streaming engine reads the whole model from disk on every pass (an 8B model: 15 GB), so a check run should
make as few passes as it can. Most engine checks ask for runs whose tokens the probes alone fix: the recorded
forward pass of every probe (GLD002, ACT*), its bfloat16/float16 shadows (NUM*), the probes with shifted norms
(CNV001), the self-tests' scripted steps (ENG001, ENG002) and the far-position check's (KVC003). The greedy
traces (GEN*, GLD003) need one pass per token (a step's token is known only once the step before it has run),
each computing a few rows while it reads everything. `prepare(ctx)`, called by each of those checks before its
own run, runs the traces and spreads all the other runs the chosen checks need over the traces' passes, as
lanes beside their steps (Rides). Which runs those are is read from the checks' declarations
(`@check(..., shares=(FORWARD, ...))`, registry.SharedRun): the runner hands `declared(chosen)` to the context,
and this module knows no check by name: the run makes no pass beyond the traces', and the work rides where the
disk, not the CPU, sets the pace (the read-ahead thread reads the next layer while the lanes compute).

Each result is stored where its check looks first (ctx.state); a check that finds nothing there runs its own
pass, so a part left out (not chosen, no room in the KV cache, an error) costs time, never a different
result. Every run left out, and why, is recorded (`fallbacks(ctx)`): the report's plan states it and the CLI
prints it as a warning line, as it does the planner's own fallback: on an 8B model one run in a pass of its
own reads 15 GB more. On a resident engine nothing is prepared: there a pass costs no reads and every check
runs as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field

DONE = "shared pass"
FALLBACK = "shared pass fallback"      # ctx.state: [{"runs": [...], "checks": [...], "reason": "..."}]
LANE_COST = 16           # tokens' worth of compute a lane costs whatever its length (job_cost)


@dataclass
class Part:
    """One shared run's share of the pass: its throwaway prefills, its scripts, and where its results go."""
    requests: list = field(default_factory=list)      # sweep.LogitsRequest
    scripts: list = field(default_factory=list)       # scripted.Script
    store: object = None                              # callable(ctx, request logits, script results)
    run: object = None                                # the registry.SharedRun it belongs to (described)


def prepare(ctx) -> None:
    """Run the shared passes once per check run, at the first engine check that asks (see the module doc)."""
    if DONE in ctx.state:
        return
    engine = ctx.engine                     # the asking check needs it anyway; building it may raise
    ctx.state[DONE] = False
    runs = getattr(ctx, "shared", None) or {}
    if not engine.streaming or not runs:
        return
    traces = next((run for run in runs if run.greedy), None)
    greedy = traces is not None
    parts = fitting(ctx, described(ctx, [run for run in runs if run.describe is not None]), greedy)
    if not parts and not greedy:
        return
    from checks.shared.prompts import new_tokens
    from reference_engine.streaming.scripted import LiveStep
    rides = Rides(parts, new_tokens(ctx.quick) if greedy else 1)
    try:
        if greedy:
            traces.traces(ctx, prefill=lambda seqs, ids: rides.run(engine, LiveStep(seqs, ids)),
                          decode=lambda seqs, ids: rides.run(engine, LiveStep(seqs, [[t] for t in ids], True)))
        rides.finish(engine, ctx)
    except Exception as e:  # every check whose part is missing runs its own pass and reports its own error
        left = ([traces] if greedy else []) + [p.run for p in parts]
        fell_back(ctx, left, f"the shared pass failed ({one_line(e)})")
        return
    ctx.state[DONE] = True


def fallbacks(ctx) -> list[dict]:
    """The shared runs this check run left to their checks' own passes, and why (empty when none was)."""
    return ctx.state.get(FALLBACK, [])


def fell_back(ctx, runs: list, reason: str) -> None:
    """Record that `runs` (registry.SharedRun) are left to the passes of the checks that read them."""
    shared = getattr(ctx, "shared", None) or {}
    runs = [run for run in runs if run is not None]
    ctx.state.setdefault(FALLBACK, []).append({
        "runs": [run.name for run in runs],
        "checks": sorted({check for run in runs for check in shared.get(run, ())}), "reason": reason})


def fallback_warning(entry: dict) -> str:
    """The warning line the CLI prints for one fallback entry."""
    return (f"warning: shared engine pass: {', '.join(entry['runs'])} run in passes of their own "
            f"({entry['reason']}); checks {', '.join(entry['checks'])} each read the weights again")


def one_line(error: Exception) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


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

def declared(chosen) -> dict:
    """The shared runs the chosen checks declare (registry.SharedRun) -> the ids of the checks that read each,
    in the order the catalogue first names them."""
    runs: dict = {}
    for spec in chosen:
        for run in spec.shares:
            runs.setdefault(run, set()).add(spec.id)
    return runs


def described(ctx, runs) -> list[Part]:
    """Every declared run's part whose inputs can be made (a check that cannot make its own, e.g. no probe
    encodes, is left to report that itself)."""
    out = []
    for run in runs:
        try:
            part = run.describe(ctx)
        except Exception as e:
            fell_back(ctx, [run], f"its inputs cannot be made ({one_line(e)})")
            continue
        if part is not None:
            part.run = run
            out.append(part)
    return out


def fitting(ctx, parts: list[Part], greedy: bool) -> list[Part]:
    """The parts whose scripts fit the engine's KV cache beside each other and the greedy traces (the largest
    is left to its own pass until they do: each check sized its run for the cache alone)."""
    from checks.shared.prompts import new_tokens, probe_inputs
    cache = ctx.engine.cache
    block = cache.block_size
    blocks = lambda n: -(-n // block)                                               # noqa: E731
    need = {id(p): sum(blocks(sum(len(step[j]) for step in s.steps if j < len(step)))
                       for s in p.scripts for j in range(s.width)) for p in parts}
    room = cache.allocator.num_free - 1
    if greedy:
        try:
            room -= sum(blocks(len(p.ids) + new_tokens(ctx.quick)) for p in probe_inputs(ctx))
        except Exception as e:
            if parts:
                fell_back(ctx, [p.run for p in parts], f"the probes' KV need is unknown ({one_line(e)})")
            return []
    parts = sorted(parts, key=lambda p: need[id(p)])
    while parts and sum(need[id(p)] for p in parts) > room:
        left = parts.pop()
        fell_back(ctx, [left.run], f"its KV blocks ({need[id(left)]}) do not fit the cache beside the others "
                                   f"({room} free)")
    return parts
