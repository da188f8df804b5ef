"""Conversion checks (CNV): the family conventions a converter must carry over survived it.

- Gemma stores RMSNorm gains as offsets (the forward multiplies by 1 + w); Llama-style code multiplies by w.
  A converter that writes one convention's numbers under the other architecture (w where 1 + w is
  expected, or the reverse) leaves every norm off by one. On trained weights the stored values cannot tell
  (trained gains range from -100 to +1000 in Gemma 3), the probes can: the model is run with its own
  convention and with the other, and the other one must not predict the probe texts much better. On weights
  still at their initialisation it is the reverse: no convention predicts anything, but every norm weight
  sits at its convention's initial value (0 for offsets, 1 for gains).
- Gemma 2 was trained with attention and final-logit soft-capping; a config that lost them (null) runs
  without the caps.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from checks.catalogue.inputs import ResourceError
from checks.catalogue.registry import Problem, SharedRun, Skip, check
from checks.shared.weights.init_stats import init_state
from checks.shared.passes import Part
from checks.shared.probe_runs import FORWARD
from checks.shared.prompts import probe_inputs

GEMMA2 = "Gemma2ForCausalLM"
# the caps every Gemma 2 release config carries (transformers' Gemma2Config defaults)
GEMMA2_CAPS = {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
# how close to its convention's initial value an untrained norm weight's mean sits (transformers: exactly there;
# factory test models jitter it by a few hundredths, a tenth at most)
INITIAL_NORM_DISTANCE = 0.25


def nll_texts(ctx) -> list[list[int]]:
    """The probes CNV001 scores (a next-token loss needs two tokens at least)."""
    return [list(p.ids) for p in probe_inputs(ctx) if len(p.ids) >= 2]


def other_convention(config) -> float:
    """The shift of every RMSNorm gain that turns the architecture's convention into the other one."""
    from reference_engine.core.families import settings
    return -1.0 if settings(config).norm == "rms_plus_one" else 1.0


def probe_nll(ctx, shift: float) -> tuple[float, float]:
    """Mean next-token negative log-likelihood (nats) of the probe texts as the model is, and with every
    RMSNorm gain shifted by `shift` (sweep.NormShift: a copy per layer, the model's weights untouched); both
    in one pass over the weights when streaming (the run's shared pass, when it holds them)."""
    from reference_engine.streaming.sweep import NormShift
    texts = nll_texts(ctx)
    if not texts:
        return float("nan"), float("nan")
    ctx.prepare_engine_runs()
    logits = shared_logits(ctx, texts, shift)
    if logits is None:
        logits = ctx.engine.logits_many(texts + texts,
                                        variants=[None] * len(texts) + [NormShift(shift)] * len(texts))
    sums = [0.0, 0.0]
    for k, (ids, x) in enumerate(zip(texts + texts, logits)):
        sums[k // len(texts)] += float(F.cross_entropy(x[:-1], torch.tensor(ids[1:]), reduction="sum"))
    count = sum(len(ids) - 1 for ids in texts)
    return sums[0] / count, sums[1] / count


def norm_shift_part(ctx) -> Part | None:
    """CNV001's probes under the other norm convention, riding on the shared passes (the loss as stored comes
    from the shared forward run's logits of the same probes)."""
    from reference_engine.streaming.sweep import LogitsRequest, NormShift
    texts, shift = nll_texts(ctx), other_convention(ctx.engine.config)
    if not texts:
        return None

    def store(ctx, logits, _):
        ctx.state[("norm_shift", shift)] = logits
    return Part([LogitsRequest(t, variant=NormShift(shift)) for t in texts], [], store)


NORM_SHIFT = SharedRun("probes under the other norm convention", norm_shift_part)


def shared_logits(ctx, texts: list[list[int]], shift: float) -> list | None:
    """[as stored..., shifted...] from the shared runs, when they hold both."""
    shifted = ctx.state.pop(("norm_shift", shift), None)
    forward = {tuple(r.probe.ids): r.logits for r in ctx.state.get(("forward", ctx.quick), [])}
    if shifted is None or not all(tuple(t) in forward for t in texts):
        return None
    return [forward[tuple(t)] for t in texts] + list(shifted)


@check("CNV001", category="numerics", severity="error", needs=("engine", "tokenizer"),
       hint="Re-convert: Gemma norm weights are offsets (1 + w); Llama-style ones are the gains themselves.",
       shares=(FORWARD, NORM_SHIFT))
def norm_convention(ctx):
    """The RMSNorm weights follow the architecture's convention (Gemma: offsets, 1 + w; others: gains, w).

    A real class of Gemma conversion bugs: a converter that writes Gemma's norm weights as full gains
    (1 + w) under a Gemma architecture (the forward then adds 1 again), or Gemma-style offsets under a
    Llama-style architecture (every norm then multiplies by a value near 0). The model still runs and
    produces fluent-looking garbage. Detected from the probe outputs: the mean next-token loss of the probe
    texts with the norms as stored, and with the other convention (all norm weights shifted by 1). A model
    whose probes the other convention predicts much better (by `margin` nats, default 1.0) has the wrong one.

    On weights still at their initialisation (tiny test models, `from_config` checkpoints: every judged matrix
    a normal draw of std initializer_range, checks/shared/weights/init_stats.py) both conventions give uniform-level
    losses and the probes cannot tell; there the stored values can: transformers initialises offsets to 0 and
    gains to 1, so untrained norm weights whose means all sit at the other convention's value (within 0.25)
    carry the wrong one.

    Remedy: re-export with a converter that knows the family (llama.cpp's convert_hf_to_gguf, transformers'
    own conversion scripts), or shift every norm weight by 1 in the right direction.
    """
    engine = ctx.engine
    shift = other_convention(engine.config)
    plus_one = shift < 0
    stated, other = probe_nll(ctx, shift)
    margin = ctx.threshold("CNV001", "margin", 1.0)
    ev = {"convention": "1 + w" if plus_one else "w", "probe_nll": round(stated, 4),
          "probe_nll_other_convention": round(other, 4), "uniform_nll": round(math.log(engine.config.vocab_size), 4)}
    if math.isfinite(other) and (not math.isfinite(stated) or other < stated - margin):
        wrong = "full gains (1 + w) stored where offsets are expected" if plus_one else \
            "offsets (w - 1) stored where full gains are expected"
        yield Problem(f"norm weights look like {wrong}: the probes' loss is {stated:.2f} nats as stored, "
                      f"{other:.2f} with every norm weight shifted by {'-1' if plus_one else '+1'}", evidence=ev)
        return
    untrained = initial_values(ctx, plus_one)
    if untrained is not None:
        wrong = "full gains (1 + w)" if plus_one else "offsets (w - 1)"
        yield Problem(f"norm weights look like {wrong}: the weights are still at their initialisation and every "
                      f"norm weight's mean sits at {1.0 if plus_one else 0.0:g} (the other convention's initial "
                      f"value) instead of {0.0 if plus_one else 1.0:g}", evidence={**ev, **untrained})


def initial_values(ctx, plus_one: bool) -> dict | None:
    """Evidence when the matrices are untrained and every norm weight's mean is at the other convention's
    initial value (1 where offsets are expected, 0 where gains are), else None (trained weights: the probes
    decide)."""
    verdict = init_state(ctx)
    matrices = [t for t in verdict.tensors if t["kind"] == "matrix"]
    names = [t["name"] for t in verdict.tensors if t["kind"] == "norm"]
    if not matrices or not names or not all(t["at_init"] for t in matrices):
        return None
    means = [float(ctx.weights.get(name).float().mean()) for name in names]
    other = 1.0 if plus_one else 0.0
    if not all(abs(m - other) <= INITIAL_NORM_DISTANCE for m in means):
        return None
    return {"weights_at_initialisation": True, "norm_tensors": len(names),
            "norm_weight_means": [round(min(means), 4), round(max(means), 4)]}


@check("CNV002", category="config", severity="warning", needs=("config",),
       hint="Restore attn_logit_softcapping: 50.0 and final_logit_softcapping: 30.0 in config.json.")
def gemma2_softcapping(ctx):
    """A Gemma 2 config keeps its attention and final-logit soft-capping.

    Gemma 2 was trained with scores capped at 50 (tanh) in attention and logits capped at 30; converters
    and older tooling (FlashAttention without soft-cap, early llama.cpp, exporters writing null) dropped
    them, which shifts every attention distribution and lets logits grow past 30. transformers' defaults
    are the caps, so an explicit null in config.json is what turns them off. With the engine available the
    evidence also names the probes' largest |logit| under the config as written.

    Remedy: set the caps back (values from the original release config).
    """
    cfg = ctx.config
    if cfg.architecture != GEMMA2:
        raise Skip("not a Gemma 2 model")
    lost = [k for k in GEMMA2_CAPS if k in cfg.raw and cfg.raw[k] is None]
    if not lost:
        return
    ev = {"disabled": lost, "release_values": {k: GEMMA2_CAPS[k] for k in lost}}
    try:
        ev["probe_max_abs_logit"] = round(max(float(ctx.engine.logits(list(p.ids)).abs().max())
                                              for p in probe_inputs(ctx)), 3)
    except (ResourceError, Skip):
        pass
    yield Problem(f"soft-capping disabled in config.json ({', '.join(lost)} = null): Gemma 2 was trained "
                  f"with it", evidence=ev)
