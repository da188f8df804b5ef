"""Who the bounds apply to. A model still at its initialisation (checks/shared/weights/init_stats.py, decided from the
weights alone) is named untrained: info when it is smaller than the bounds are calibrated for (the factory and
toy models tests build), judged and named when it is not (a full-size checkpoint at its initial weights is a
conversion that lost them: an error). A model too small to be held to the bounds is measured but not judged:
the bounds (probes/competence/bounds.py) hold for language models from tens of millions of parameters up; the
embedded demo model (0.9M parameters, 1.3M training tokens of one novel) reads the built-in
text worse than uniform (7.5 nats, ln V = 6.9) and copies nothing, which is what a model that size and that
briefly trained does, not a fault."""
from __future__ import annotations

from dataclasses import dataclass

from checks.shared.weights.init_stats import init_standing, parameter_count
from probes.competence.bounds import MIN_JUDGED_PARAMETERS

MIN_PARAMETERS = MIN_JUDGED_PARAMETERS      # below: measured, reported as info, never judged


@dataclass(frozen=True)
class Standing:
    severity: str | None          # None: judged (the check's own severity); "info": measured, not judged
    prefix: str                   # what the message starts with when not judged
    evidence: dict


def standing(ctx) -> Standing:
    """Whether this model is held to the bounds (cached per run)."""
    key = ("competence", "standing")
    if key not in ctx.state:
        init = init_standing(ctx)
        count = init.evidence.get("parameters") or parameter_count(ctx)
        evidence = {"parameters": count, "weights_at_initialisation": init.evidence["weights_at_initialisation"]}
        if init.prefix:
            result = Standing(init.severity, init.prefix, {**evidence, "untrained_reason": init.evidence["reason"]})
        elif 0 < count < MIN_PARAMETERS:
            result = Standing("info", f"a {count / 1e6:.1f}M-parameter model is too small to be held to the "
                                      f"competence bounds (from {MIN_PARAMETERS / 1e6:.0f}M): ", evidence)
        else:
            result = Standing(None, "", evidence)
        ctx.state[key] = result
    return ctx.state[key]
