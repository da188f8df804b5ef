"""CMP003: greedy continuations that lock into one token or a short loop from their first steps."""
from __future__ import annotations

from checks.competence.locate import failure_evidence
from checks.shared.standing import standing
from checks.catalogue.registry import Problem, Skip, check
from checks.shared.probe_runs import GREEDY, probe_traces

MAX_PERIOD = 3          # a loop of up to 3 tokens
LOCKED_BY = 2           # ... that starts within the first 2 generated tokens
MIN_TOKENS = 8          # and runs to the end of a trace at least this long


def collapse_start(tokens: list[int]) -> int | None:
    """The first step from which `tokens` repeat with a period of at most MAX_PERIOD to the end (at least two
    full periods), if it is within LOCKED_BY; else None."""
    for start in range(LOCKED_BY + 1):
        tail = tokens[start:]
        for period in range(1, MAX_PERIOD + 1):
            if len(tail) >= 2 * period + 2 and all(tail[i] == tail[i - period] for i in range(period, len(tail))):
                return start
    return None


@check("CMP003", category="competence", severity="error", needs=("engine", "tokenizer"),
       hint="Greedy text that locks from the first step is what scrambled weights produce: see CMP001/CMP002's "
            "evidence for the layer and the other findings to start from.",
       shares=(GREEDY,))
def greedy_collapse(ctx):
    """Greedy continuations of the neutral probes do not lock into one token or a short loop from the start.

    The probes' greedy traces (the ones GEN* read) are examined: a trace that repeats one token, or a loop of
    up to 3 tokens, from its first or second generated token to its end collapsed. Healthy models loop now and
    then late in a long answer (GEN002 watches that); locking from the first steps on most probes is what
    weights that do not compute language produce. Fires when at least half of the traces (and two) collapse.
    Models under 50M parameters are measured, never judged (info); from 50M up, weights still at their
    initialisation are judged and named (a conversion that lost them).
    """
    rows = [(p.label, t.tokens) for p, t in probe_traces(ctx)
            if t.finish != "nonfinite" and len(t.tokens) >= MIN_TOKENS]
    if not rows:
        raise Skip(f"no greedy trace of {MIN_TOKENS}+ tokens (early EOS or non-finite logits: NUM*)")
    locked = [(label, tokens) for label, tokens in rows if collapse_start(tokens) is not None]
    if len(locked) < 2 or 2 * len(locked) < len(rows):
        return
    evidence = {"collapsed": [{"probe": label, "tokens": tokens[:16]} for label, tokens in locked],
                "traces": len(rows)}
    message = f"{len(locked)} of {len(rows)} greedy continuations lock into a loop of <= {MAX_PERIOD} tokens " \
              f"from their first steps"
    stand = standing(ctx)
    if stand.severity is not None:
        yield Problem(f"{stand.prefix}{message}", severity=stand.severity, evidence={**evidence, **stand.evidence})
        return
    suffix, more = failure_evidence(ctx)
    yield Problem(f"{stand.prefix}{message}{suffix}",
                  evidence={**evidence, **more, **(stand.evidence if stand.prefix else {})})
