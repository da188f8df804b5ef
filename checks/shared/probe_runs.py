"""Engine runs shared by the engine checks: one recorded forward pass per probe and greedy traces. Each run
happens once per check run (cached in ctx.state). Whether a model is trained at all is decided from its weights
(checks/shared/weights/init_stats.py), not from these runs."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from checks.catalogue.registry import SharedRun
from checks.shared.passes import Part
from checks.shared.prompts import ProbeInput, new_tokens, probe_inputs

STAT_NAMES = ("min", "max", "mean", "std", "absmax")


@dataclass
class PointStats:
    """Statistics of one capture point (layer, module) over a probe's tokens, finite values only."""
    layer: int
    module: str
    min: float
    max: float
    mean: float
    std: float
    absmax: float
    nonfinite: int
    numel: int


def point_stats(layer: int, module: str, x: torch.Tensor) -> PointStats:
    x = x.detach().float().reshape(-1)
    finite = torch.isfinite(x)
    bad = int((~finite).sum())
    x = x[finite] if bad else x
    if x.numel() == 0:
        nan = float("nan")
        return PointStats(layer, module, nan, nan, nan, nan, nan, bad, 0)
    return PointStats(layer, module, float(x.min()), float(x.max()), float(x.mean()),
                      float(x.std(unbiased=False)), float(x.abs().max()), bad, int(x.numel()))


class StatsRecorder:
    """Capture hook: PointStats for every hook point, in call order (see reference_engine/capture.py)."""

    def __init__(self):
        self.points: list[PointStats] = []

    def __call__(self, layer: int, module: str, x: torch.Tensor) -> None:
        self.points.append(point_stats(layer, module, x))
        return None

    def first_bad(self, explode: float) -> PointStats | None:
        """The first point whose values are non-finite or whose |max| exceeds `explode`."""
        return next((p for p in self.points if p.nonfinite or p.absmax > explode), None)


@dataclass
class ForwardRun:
    probe: ProbeInput
    logits: torch.Tensor          # [seq, vocab] float32, on the CPU
    stats: StatsRecorder = field(default_factory=StatsRecorder)


def run_forward(engine, probe: ProbeInput) -> ForwardRun:
    recorder = StatsRecorder()
    logits = engine.logits(list(probe.ids), capture=recorder)
    return ForwardRun(probe, logits.float().cpu(), recorder)


def forward_runs(ctx) -> list[ForwardRun]:
    """One recorded forward pass of every probe on the run's engine (cached); a streaming engine runs all
    probes in one pass over the weights (Engine.logits_many), each exactly as Engine.logits would."""
    ctx.prepare_engine_runs()
    key = ("forward", ctx.quick)
    if key not in ctx.state:
        ctx.state[key] = run_forwards(ctx.engine, probe_inputs(ctx))
    return ctx.state[key]


def run_forwards(engine, probes, dtypes=None) -> list[ForwardRun]:
    """ForwardRun of each probe (in dtypes[i] when given: a low-precision shadow in the same pass)."""
    probes = list(probes)
    recorders = [StatsRecorder() for _ in probes]
    logits = engine.logits_many([list(p.ids) for p in probes], captures=recorders, dtypes=dtypes)
    return [ForwardRun(p, x.float().cpu(), r) for p, x, r in zip(probes, logits, recorders)]


def forward_part(ctx) -> Part:
    """Every probe's recorded forward pass, as throwaway prefills riding on the shared passes."""
    from reference_engine.streaming.sweep import LogitsRequest
    probes = probe_inputs(ctx)
    recorders = [StatsRecorder() for _ in probes]

    def store(ctx, logits, _):
        ctx.state[("forward", ctx.quick)] = [ForwardRun(p, x.float().cpu(), r)
                                             for p, x, r in zip(probes, logits, recorders)]
    return Part([LogitsRequest(list(p.ids), r) for p, r in zip(probes, recorders)], [], store)


FORWARD = SharedRun("forward", forward_part)       # forward_runs(ctx): GLD002, ACT*, NUM*, CNV001
GREEDY = SharedRun("greedy traces", traces=lambda ctx, prefill, decode: run_traces(ctx, prefill, decode))
# probe_traces(ctx): GEN*, GLD003; the passes the other runs ride on


# ---- greedy traces ---------------------------------------------------------------------------------------

def probe_traces(ctx) -> list[tuple[ProbeInput, "GreedyTrace"]]:
    """(probe, greedy trace) for every probe, generated once per run as one batch (a streaming engine: one
    pass per step); the generation checks and golden step 3 read the same traces."""
    ctx.prepare_engine_runs()
    if "greedy" not in ctx.state:
        run_traces(ctx)
    return ctx.state["greedy"]


def run_traces(ctx, prefill=None, decode=None) -> None:
    """Generate the probes' greedy traces into ctx.state (prefill, decode: see greedy_traces)."""
    probes = probe_inputs(ctx)
    runs = greedy_traces(ctx.engine, [p.ids for p in probes], new_tokens(ctx.quick), eos_ids(ctx.engine),
                         prefill, decode)
    ctx.state["greedy"] = list(zip(probes, runs))


@dataclass
class GreedyTrace:
    prompt: tuple[int, ...]
    tokens: list[int]             # generated ids (an EOS that ended it included)
    eos_probs: list[float]        # P(any EOS id) at each step
    finish: str                   # "eos", "length", "nonfinite" or "context"
    first_logits: torch.Tensor | None = None   # [vocab] float32 of the prompt's last position (the prefill's)


def eos_ids(engine) -> frozenset[int]:
    from reference_engine.generate.loop import eos_ids_of
    try:
        return eos_ids_of(engine)
    except Exception:  # a broken tokenizer/generation config is another check's finding
        return frozenset(engine.config.eos_token_ids or [])


def greedy_traces(engine, prompts, steps: int, eos: frozenset[int], prefill=None, decode=None) -> list[GreedyTrace]:
    """Greedy decoding of several prompts as one batch through the paged cache (one prefill, then one batched
    decode per step), recording P(EOS) at every step. A step with non-finite logits ends that prompt with
    the id argmax picks (NaN -> id 0), which is what a server would emit. prefill(seq_ids, token_lists) and
    decode(seq_ids, token_ids) stand for engine.prefill and engine.decode (the shared pass runs other work
    beside each step)."""
    prompts = [tuple(int(t) for t in p) for p in prompts]
    eos_list = [e for e in eos if 0 <= e < engine.config.vocab_size]
    limit = engine.config.max_position_embeddings
    traces = [GreedyTrace(p, [], [], "length") for p in prompts]
    live = list(range(len(prompts)))
    with engine.scratch(len(prompts)) as seqs:
        logits = (prefill or engine.prefill)(list(seqs), [list(p) for p in prompts])
        for trace, row in zip(traces, logits):
            trace.first_logits = row.cpu()
        for step in range(steps):
            for row, i in enumerate(live):
                _advance(traces[i], logits[row], eos_list, limit)
            live = [i for i in live if traces[i].finish == "length" and len(traces[i].tokens) == step + 1]
            if not live or step + 1 == steps:
                break
            logits = (decode or engine.decode)([seqs[i] for i in live], [traces[i].tokens[-1] for i in live])
    return traces


def _advance(trace: GreedyTrace, logits: torch.Tensor, eos_list: list[int], limit: int) -> None:
    token = int(torch.argmax(logits))
    trace.tokens.append(token)
    if not torch.isfinite(logits).all():
        trace.finish = "nonfinite"
        return
    trace.eos_probs.append(float(torch.softmax(logits.float(), -1)[eos_list].sum()) if eos_list else 0.0)
    if token in eos_list:
        trace.finish = "eos"
    elif len(trace.prompt) + len(trace.tokens) >= limit:
        trace.finish = "context"
