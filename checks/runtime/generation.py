"""Generation quality on the probes (greedy): empty output and immediate EOS, repeated n-grams, EOS probability
oscillation (generation that neither stops nor continues coherently), and a chat answer that never ends.

Freshly initialised models (factory test models, a `from_config` sketch nobody trained): their generations are
noise, so these checks report what they see as info, never as a warning -- below the size the competence bounds
are calibrated for (probes/competence/bounds.py MIN_JUDGED_PARAMETERS). A model that size or larger at its
initial weights is a conversion that lost them: judged at the checks' own severity, named in the message.
Whether the weights are still at their initialisation is decided from the weights alone
(checks/shared/weights/init_stats.py), never from the outputs being judged: broken weights also push the probe loss
towards uniform, and must keep their severity.
"""
from __future__ import annotations

from checks.shared.weights.init_stats import init_standing
from checks.shared.probe_runs import GREEDY, GreedyTrace, probe_traces
from checks.catalogue.registry import CannotRun, Problem, Skip, check

NGRAM = 3
MIN_TOKENS_FOR_REPETITION = 12
HIGH_EOS, LOW_EOS = 0.45, 0.25   # P(EOS) bands between which a swing counts as one oscillation


traces = probe_traces   # (probe, greedy trace) of every probe, once per run


def text_of(ctx, trace: GreedyTrace) -> str:
    ids = trace.tokens[:-1] if trace.finish == "eos" else trace.tokens
    try:
        return ctx.tokenizer.decode(ids, skip_special_tokens=True)
    except Exception as e:
        return f"<decode failed: {type(e).__name__}>"


def repeated_ngram_rate(tokens: list[int], n: int = NGRAM) -> float:
    """Fraction of the n-grams of `tokens` that already occurred earlier (0 = none repeats, ->1 = a loop)."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def eos_swings(probs: list[float], high: float = HIGH_EOS, low: float = LOW_EOS) -> int:
    """How often P(EOS) moves from above `high` to below `low` or back (hysteresis: noise does not count)."""
    state, swings = None, 0
    for p in probs:
        now = "high" if p >= high else "low" if p < low else state
        if state is not None and now != state:
            swings += 1
        state = now
    return swings


@check("GEN001", category="generation", severity="warning", needs=("engine", "tokenizer"),
       hint="Check EOS ids (VOC004/VOC005), the chat template and the embedding of special tokens (EMB001).",
       shares=(GREEDY,))
def empty_or_immediate_eos(ctx):
    """Greedy generation produces text: not an empty output, not EOS as the very first token on most probes.

    A model that answers every probe with EOS (or with tokens that decode to nothing) is usually wired to
    the wrong EOS/pad ids, has zeroed special-token rows, or gets a prompt the template mangled. Fires when
    at least half of the probes end immediately or produce only whitespace; the generated text is evidence.
    """
    init = init_standing(ctx)
    runs = traces(ctx)
    empty = [(p.label, t.tokens[:8]) for p, t in runs if not text_of(ctx, t).strip()]
    immediate = [p.label for p, t in runs if t.finish == "eos" and len(t.tokens) == 1]
    if 2 * len(immediate) >= len(runs):
        yield Problem(f"{init.prefix}EOS is the first generated token on {len(immediate)} of {len(runs)} "
                      "probes", severity=init.severity, evidence={"probes": immediate, **init.evidence})
    elif 2 * len(empty) >= len(runs):
        yield Problem(f"{init.prefix}greedy output is empty on {len(empty)} of {len(runs)} probes",
                      severity=init.severity, evidence={"outputs": empty, **init.evidence})


@check("GEN002", category="generation", severity="warning", needs=("engine", "tokenizer"),
       hint="Check the RoPE settings (CFG003, KVC003) and the reference engine self-tests (ENG001/ENG002).",
       shares=(GREEDY,))
def repetition(ctx):
    """Greedy outputs do not loop: the repeated-n-gram rate stays below `max_rate` on most probes.

    For each probe's greedy continuation (at least 12 tokens) the fraction of token trigrams seen earlier
    in the same output. Small models loop now and then, so this fires when the mean rate over the probes
    exceeds `max_rate` (default 0.5) — every probe collapsing into a loop, which is what broken position
    ids, a mis-scaled RoPE or a corrupted KV cache produce (a missing position_ids has been measured to
    multiply repetition by five). Generated texts are evidence.
    """
    init = init_standing(ctx)
    limit = ctx.threshold("GEN002", "max_rate", 0.5)
    rows = [(p.label, repeated_ngram_rate(t.tokens), text_of(ctx, t)) for p, t in traces(ctx)
            if len(t.tokens) >= MIN_TOKENS_FOR_REPETITION]
    if not rows:
        raise Skip(f"outputs shorter than {MIN_TOKENS_FOR_REPETITION} tokens (--quick or early EOS)")
    mean = sum(r[1] for r in rows) / len(rows)
    if mean > limit:
        yield Problem(f"{init.prefix}greedy outputs repeat themselves: mean repeated-{NGRAM}-gram rate "
                      f"{mean:.0%} over {len(rows)} probes", severity=init.severity,
                      evidence={"outputs": [{"probe": r[0], "rate": r[1], "text": r[2][:300]} for r in rows],
                                **init.evidence})


@check("GEN003", category="generation", severity="warning", needs=("engine", "tokenizer"),
       hint="Check the EOS ids in generation_config.json; consider SamplingParams.eos_patience.",
       shares=(GREEDY,))
def eos_oscillation(ctx):
    """P(EOS) does not swing back and forth between high and low during a greedy generation.

    EOS oscillation: the model's EOS probability keeps flipping around 0.4-0.6 and never settles,
    so generation neither stops cleanly nor continues coherently. Counts swings of P(EOS) between >= 0.45
    and < 0.25 per probe; `min_swings` (default 4) or more on any probe fires, with the P(EOS) trace.
    """
    init = init_standing(ctx)
    need = ctx.threshold("GEN003", "min_swings", 4)
    for probe, trace in traces(ctx):
        swings = eos_swings(trace.eos_probs)
        if swings >= need:
            yield Problem(f"{init.prefix}{probe.label}: P(EOS) swings {swings} times between high and low "
                          f"without settling", severity=init.severity,
                          evidence={"eos_probs": [round(p, 4) for p in trace.eos_probs],
                                    "text": text_of(ctx, trace)[:300], **init.evidence})


@check("GEN004", category="generation", severity="warning", needs=("engine", "tokenizer"),
       hint="The chat template's end-of-turn token must be an EOS id (generation_config.json eos_token_id).",
       shares=(GREEDY,))
def chat_never_ends(ctx):
    """The chat probe's answer ends with EOS within max_new_tokens (P(EOS) rises at some point).

    A short chat question ("What is the capital of France?") should be answered and closed well within
    the default budget of 32 tokens. Hitting max_new_tokens with P(EOS) never above 0.1 means the model
    cannot stop: its end-of-turn token is not among the EOS ids, or the template ends turns differently
    from training. Skipped with --quick (too few tokens) and for models without a chat template.
    """
    if ctx.quick:
        raise CannotRun("--quick: too few new tokens to expect a finished answer")
    chat = [(p, t) for p, t in traces(ctx) if p.chat]
    if not chat:
        raise Skip("no chat template")
    init = init_standing(ctx)
    probe, trace = chat[0]
    peak = max(trace.eos_probs, default=0.0)
    if trace.finish == "length" and peak < 0.1:
        yield Problem(f"{init.prefix}the chat answer hits max_new_tokens ({len(trace.tokens)}) and P(EOS) "
                      f"never exceeds {peak:.2g}", severity=init.severity,
                      evidence={"text": text_of(ctx, trace)[:300], "max_eos_prob": peak, **init.evidence})
