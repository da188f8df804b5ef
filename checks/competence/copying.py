"""CMP002: in-context copying of a random sequence of ordinary tokens."""
from __future__ import annotations

from checks.competence.locate import failure_evidence
from checks.competence.runs import COMPETENCE, competence_run
from checks.shared.standing import standing
from checks.catalogue.registry import Problem, Skip, check
from probes.competence import copy_score, judge_copy


@check("CMP002", category="competence", severity="error", needs=("engine", "tokenizer"),
       hint="Look at attention and positions first (RoPE layout, q/k permutation, KV heads), then compare with a "
            "healthy copy (llmdoctor diff).",
       shares=(COMPETENCE,))
def copies_in_context(ctx):
    """The model copies: a random token sequence shown twice is predicted from its first copy.

    A random sequence of ordinary word pieces (no language) is shown twice. Any trained decoder predicts the second
    copy from the first (induction heads): its loss there collapses to a small fraction of the first copy's
    (measured ranges: docs/competence.md). Scrambled weights, broken positions (a rotary permutation applied twice)
    or a broken attention cannot: the ratio stays near 1. It needs no language, so it holds for models trained on
    text the built-in corpus does not cover. Bound: copy ratio < 0.5. Models under 50M parameters are measured,
    never judged (info); from 50M up, weights still at their initialisation are judged and named (a conversion that
    lost them).
    """
    run = competence_run(ctx)
    if run.copy is None or run.copy_logprobs is None:
        raise Skip("the vocabulary has too few ordinary word pieces for a copy sequence (or no room in the context)")
    score = copy_score(run.copy_logprobs, run.copy.start, run.copy.length)
    verdict = judge_copy(score.ratio)
    if verdict.ok:
        return
    evidence = {**score.as_dict(), "bound": verdict.bound, "length": run.copy.length,
                "sequence": run.copy.text[:200]}
    stand = standing(ctx)
    if stand.severity is not None:
        yield Problem(f"{stand.prefix}{verdict.why}: the second copy is not predicted from the first",
                      severity=stand.severity, evidence={**evidence, **stand.evidence})
        return
    suffix, more = failure_evidence(ctx)
    yield Problem(f"{stand.prefix}the model does not copy in context: {verdict.why}, loss {score.second:.2f} nats "
                  f"on the second copy vs {score.first:.2f} on the first{suffix}",
                  evidence={**evidence, **more, **(stand.evidence if stand.prefix else {})})
