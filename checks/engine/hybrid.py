"""The reference engine's self-test on a hybrid model's recurrent layers (ENG010-ENG013): what a state kept per
sequence (short convolution window, Mamba2 SSM state; core/cache/state_cache.py) must guarantee. A recurrent
layer computes a prefill one way (a chunked, parallel form) and a decode step another (the recurrence), keeps a
state per sequence that padding or a neighbour must never touch, and must start every new sequence from zero.
These are the bugs serving stacks ship for hybrids (vllm#57720 garbled one-token prompts, llama.cpp#13194
re-processing, sglang#22764 accuracy gaps); here a finding is a bug in llmdoctor's engine, never the model's.
They apply only to a model with recurrent layers (the cache layout of its family)."""
from __future__ import annotations

import torch

from checks.engine.selftest import ENGINE_BUG, PREFIX
from checks.catalogue.registry import Problem, Skip, check
from checks.shared.logit_compare import batched_and_alone, close, probe_sequence, scripted_results
from reference_engine.core import families
from reference_engine.streaming.scripted import Script

CHUNKS = (1, 3, 8)            # prefill chunk sizes compared with one prefill (1: every token a decode step)
FINITE_STEPS, FINITE_STEPS_QUICK, FINITE_STEPS_STREAMING = 256, 64, 16   # ENG013 greedy steps


def recurrent_kinds(ctx) -> list[str]:
    """The model's recurrent mixer kinds; Skip for an attention-only model."""
    kinds = sorted(set(families.mixers(ctx.engine.config)) - {"attention"})
    if ctx.engine.cache.states is None or not kinds:
        raise Skip("no recurrent layers (attention only)")
    return kinds


def probe_length(ctx) -> int:
    """Longer than any conv window and SSD chunk of a small model, within the context."""
    return min(24 if ctx.quick else 48, ctx.engine.config.max_position_embeddings - 1)


@check("ENG010", category="selftest", severity="error", needs=("engine", "tokenizer"),
       hint=ENGINE_BUG + " Suspects: a recurrent mixer's chunked (prefill) form disagreeing with its recurrent "
                         "(decode) form, or a conv window not carried between steps.")
def recurrent_chunks_vs_one_prefill(ctx):
    """Reference engine self-test: a recurrent layer gives the same logits prefilled at once, in chunks, or
    token by token.

    The probe ids run as one prefill, then again as prefills of 3 and 8 tokens and as one decode step per
    token; every position's logits must agree (float32: 1e-4 relative and the same argmax; low precision:
    top-5 containment). A chunked SSD that mishandles the state entering a chunk, a decode step that forgets
    the conv window or applies the decay twice shows here (vllm#57720: Granite 4 garbled one-token prompts).
    """
    kinds, ids = recurrent_kinds(ctx), probe_sequence(ctx, probe_length(ctx))
    scripts = [Script([[ids]], all_logits=True)]
    scripts += [Script([[ids[i:i + c]] for i in range(0, len(ids), c)], all_logits=True) for c in CHUNKS]
    results = scripted_results(ctx, scripts)
    full = results[0][0]
    for chunk, steps in zip(CHUNKS, results[1:]):
        result = close(torch.cat(steps), full, ctx.engine.dtype)
        if not result["ok"]:
            yield Problem(f"{PREFIX}{'/'.join(kinds)} layers: a prefill in chunks of {chunk} disagrees with one "
                          f"prefill (relative diff {result['rel_diff']:.3g})",
                          evidence={**result, "chunk": chunk, "tokens": len(ids), "kinds": kinds})
            return


@check("ENG011", category="selftest", severity="error", needs=("engine", "tokenizer"),
       hint=ENGINE_BUG + " Suspects: a recurrent mixer running the packed batch as one sequence, or state "
                         "slots mixed up between sequences.")
def recurrent_batch_vs_alone(ctx):
    """Reference engine self-test: sequences of unequal lengths batched together get the logits each gets alone.

    Three runs of the probe ids (the full length, about half, and 3 tokens) are prefilled as one step and
    decoded one step together, then each alone; logits must agree. A recurrent layer that lets one
    sequence's tokens (or padding) into another's state shows here, as a padded batch leaking into the state
    of its shorter rows does in other stacks.
    """
    recurrent_kinds(ctx)
    ids = probe_sequence(ctx, probe_length(ctx))
    rows = [ids, ids[len(ids) // 2 - 1:], ids[:3]]
    batched, alone = batched_and_alone(ctx, rows)
    result = close(batched, alone, ctx.engine.dtype)
    if not result["ok"]:
        yield Problem(f"{PREFIX}recurrent layers: a batch of unequal lengths differs from each sequence alone "
                      f"(relative diff {result['rel_diff']:.3g})",
                      evidence={**result, "lengths": [len(r) for r in rows]})


@check("ENG012", category="selftest", severity="error", needs=("engine", "tokenizer"),
       hint=ENGINE_BUG + " Suspects: a state slot handed to a new sequence without zeroing it (a freed "
                         "sequence's state, or the state of a preempted one that is recomputed).")
def recurrent_state_starts_from_zero(ctx):
    """Reference engine self-test: a new sequence never reads the state a finished one left behind.

    A sequence runs the probe and a few decode steps and is freed; its id is reused for a short prompt, and a
    second sequence is truncated back to 0 tokens (what preemption by recompute does) and prefilled again.
    Both must give the logits the short prompt gets on a fresh sequence: a recurrent state reused across
    requests answers one user with another's context.
    """
    recurrent_kinds(ctx)
    engine, ids = ctx.engine, probe_sequence(ctx, probe_length(ctx))
    short = ids[len(ids) // 2:len(ids) // 2 + 5]
    with engine.scratch(1) as (fresh,):
        expected = engine.prefill([fresh], [short])
    with engine.scratch(2) as (first, second):
        engine.prefill([first, second], [ids, ids])
        engine.decode([first, second], [ids[0], ids[1]])
        engine.free(first)
        reused = engine.prefill([first], [short])                     # the same id, started again
        engine.cache.truncate(second, 0)                              # preempted: recomputed from scratch
        restarted = engine.prefill([second], [short])
    for how, got in (("a freed sequence's id reused", reused), ("a sequence truncated to 0", restarted)):
        result = close(got, expected, engine.dtype)
        if not result["ok"]:
            yield Problem(f"{PREFIX}{how} does not start from a zero recurrent state: its logits differ from a "
                          f"fresh sequence's (relative diff {result['rel_diff']:.3g})",
                          evidence={**result, "case": how, "tokens": len(short)})


@check("ENG013", category="selftest", severity="error", needs=("engine", "tokenizer"),
       hint=ENGINE_BUG + " Suspects: a decay computed with the wrong sign (exp(+dt*|A|)) or a state that "
                         "accumulates without decaying.")
def recurrent_state_stays_finite(ctx):
    """Reference engine self-test: the recurrent state and the logits stay finite over a long greedy generation.

    The probe is prefilled and greedily decoded for 256 steps (64 with --quick, 16 when streaming one layer at
    a time; threshold ENG013.steps); every state tensor of every recurrent layer and every step's logits must
    be finite at the end, and the largest |state| is reported.
    A recurrence whose decay is inverted grows geometrically and overflows within a few hundred tokens, long
    after short tests pass. (A state that is finite but wrong is ENG010's finding.)
    """
    recurrent_kinds(ctx)
    engine = ctx.engine
    steps = int(ctx.threshold("ENG013", "steps", FINITE_STEPS_QUICK if ctx.quick else FINITE_STEPS))
    if getattr(engine, "streaming", False):        # every decode step is a pass over the weights read from disk
        steps = min(steps, FINITE_STEPS_STREAMING)
    steps = min(steps, engine.config.max_position_embeddings - probe_length(ctx) - 1)
    bad_step, peak = None, 0.0
    with engine.scratch(1) as (seq,):
        logits = engine.prefill([seq], [probe_sequence(ctx, probe_length(ctx))])
        for step in range(steps):
            if bad_step is None and not torch.isfinite(logits).all():
                bad_step = step
            logits = engine.decode([seq], [int(logits[0].nan_to_num(0.0).argmax())])
        problems = engine.cache.states.validate({seq})
        peak = max(float(t.abs().nan_to_num(float("inf")).max()) for layer in engine.cache.states.states[seq].values()
                   for t in layer.values())
    if problems or bad_step is not None:
        yield Problem(f"{PREFIX}after {steps} greedy steps " + (problems[0] if problems else
                      f"the logits are not finite from step {bad_step}"),
                      evidence={"steps": steps, "first_nonfinite_logits_step": bad_step,
                                "state_problems": problems[:5], "max_abs_state": peak})
