"""CMP001: the built-in text's perplexity against ln V and the text's own unigram baseline."""
from __future__ import annotations

import math

from checks.competence.locate import failure_evidence
from checks.competence.runs import COMPETENCE, competence_run
from checks.shared.standing import standing
from checks.catalogue.registry import Problem, check
from probes.competence import judge_text, mean_loss, unigram_loss


def part_losses(run) -> list[dict]:
    """Each part's mean loss (log-prob i scores token i + 1: a span [start, end) is log-probs start-1 .. end-2)."""
    rows = []
    for s in run.text.spans:
        lp = run.text_logprobs[max(s.start - 1, 0):s.end - 1]
        rows.append({"part": s.name, "tokens": s.end - s.start, "loss": round(mean_loss(lp), 3),
                     "chars_per_token": round(s.chars_per_token, 2)})
    return rows


@check("CMP001", category="competence", severity="error", needs=("engine", "tokenizer"),
       hint="Compare with a healthy copy (llmdoctor diff) and re-export or re-quantize the weights; the evidence "
            "names the first failing layer and the other findings to start from.",
       shares=(COMPETENCE,))
def builtin_text_loss(ctx):
    """The model reads text: its loss on the built-in text is far below uniform and below a unigram model.

    Built-in text (prose in several languages and scripts, code, numbers; the model's tokenizer decides which
    parts apply) is scored in one prefill. A model that reads its context beats ln V (uniform guessing) by a
    wide margin and beats the text's own unigram model (its token frequencies, fitted on the text itself);
    weights that are wrong in a way the files cannot show (int4 codes packed in the wrong order, a rotary
    permutation applied twice, layers written under the wrong indices, transposed projections, bytes of one
    dtype read as another, lost norms) lose to both, and every other check still passes because both
    implementations agree on the wrong weights. Bound: mean loss < min(0.6 ln V, unigram) (probes/competence/
    bounds.py, calibrated in docs/competence.md). The evidence names the first layer where a logit lens stops
    reading sense and the other findings of the run to start from. Models under 50M parameters are measured,
    never judged (info), untrained ones named untrained; a model of 50M parameters or more whose weights are
    still at their initialisation is judged and named (a conversion or save that lost the trained weights).
    """
    run = competence_run(ctx)
    vocab = ctx.engine.config.vocab_size
    loss, unigram = mean_loss(run.text_logprobs), unigram_loss(run.text.scored_ids)
    verdict = judge_text(loss, vocab, unigram)
    if verdict.ok:
        return
    evidence = {"loss": loss, "ln_v": math.log(vocab), "unigram_loss": unigram, "bound": verdict.bound,
                "tokens": len(run.text_logprobs), "parts": part_losses(run), "parts_left_out": run.text.skipped}
    stand = standing(ctx)
    if stand.severity is not None:
        yield Problem(f"{stand.prefix}{verdict.why}", severity=stand.severity, evidence={**evidence,
                                                                                       **stand.evidence})
        return
    suffix, more = failure_evidence(ctx)
    yield Problem(f"{stand.prefix}the model does not read the built-in text: {verdict.why}{suffix}",
                  evidence={**evidence, **more, **(stand.evidence if stand.prefix else {})})
