"""EPT06x: does the deployment talk sense? The competence probes through the server's API.

These run with or without `--model`. Alone, the server is held to the bounds any trained model meets
(probes/competence/bounds.py); with a model, the same texts go through the reference engine and the two are
put side by side, so a checkpoint that is itself untrained or broken is told apart from a deployment that
breaks a healthy one.
"""
from __future__ import annotations

import math

from checks.endpoint import competence_reference as reference_side
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check
from probes.competence import (MAX_UNIGRAM_FRACTION, Verdict, copy_score, judge_copy, judge_text, mean_loss,
                               unigram_loss)
from probes.endpoint.competence_probe import (SEQUENCE_TOKENS, Continued, CopyRun, GreedyCopy, continue_sequences,
                                              copy_text, copy_words, greedy_copy, greedy_copy_prompt, matched_words,
                                              served_copy, score_part)
from probes.endpoint.client import EndpointError
from probes.endpoint.prompt_logprobs import NotOffered, prompt_prefix
from probes.endpoint.text_parts import plan_parts

GAP_WARN = 0.5          # nats/token the server may lose against its checkpoint (4-bit GGUFs of SmolLM2: < 0.2)
MIN_GREEDY_COPY = 0.5   # generated route: at least half the words that follow must be copied (healthy: all)
MIN_SEQUENCES = 3       # of the six well-known sequences, continued with the right word (healthy: all six)
NEXT_ALONE = ("where to look: the served weights, their quantization and conversion; rerun with --model to hold "
              "the server to its checkpoint")
NEXT_WITH = ("where to look: EPT041/EPT042 compare the served tokens and logprobs with the checkpoint token by "
             "token; the served file's weights, quantization and conversion")


def next_step(has_reference: bool) -> str:
    return NEXT_WITH if has_reference else NEXT_ALONE


def completions(call):
    """call(); a server without /v1/completions (404: chat-only) makes the check skip, naming the route."""
    try:
        return call()
    except EndpointError as e:
        if e.status == 404:
            raise Skip(f"the server has no {e.route or '/v1/completions'} route (chat only): the probe needs plain "
                       f"text completions") from None
        raise


def judge_loss(loss: float, unigram: float, vocab_size: int | None) -> Verdict:
    """probes.competence.bounds.judge_text; without a model the vocabulary size is unknown and only the
    unigram bound holds."""
    if vocab_size:
        return judge_text(loss, vocab_size, unigram)
    bound = MAX_UNIGRAM_FRACTION * unigram
    return Verdict(math.isfinite(loss) and loss < bound, bound,
                   f"mean loss {loss:.2f} nats/token (bound {bound:.2f}: unigram baseline {unigram:.2f}; "
                   f"ln V unknown without --model)")


@check("EPT061", category="endpoint", severity="error", needs=("endpoint",),
       hint="the served model does not predict ordinary text: check the served weights, their quantization "
            "and conversion; with --model, compare with the checkpoint")
@asks_server
def text_loss(ctx: EndpointInputs):
    """The server's loss on the built-in text, from its prompt logprobs, against what any trained model meets.

    Each part of the built-in text (prose in several languages, code, numbers; the server's tokenizer decides
    which apply) is sent as a completion prompt with echo/prompt logprobs (vLLM, TGI, llama-cpp-python, OpenAI
    echo). The pooled mean loss must beat the text's own unigram baseline (and 0.6 ln V when the vocabulary is
    known): a deployment that does not talks nonsense, whatever its files say. With --model the reference engine
    scores the same texts: a server worse by more than 0.5 nats/token is a degraded deployment (warning); a
    reference that fails the bound itself is an untrained or broken checkpoint (info here; `llmdoctor check`
    judges it). Servers without prompt logprobs (llama.cpp, Ollama) skip: EPT062 judges them from generated
    tokens."""
    ref = reference_side.optional_reference(ctx)
    try:
        prefix = prompt_prefix(ctx.surface, reference_side.bos_text(ref), ctx.tokenize)
        planned, skipped = plan_parts(ctx.tokenize)
        scores, parts = [], []
        for plan in planned:
            score, why = score_part(ctx.surface, plan.part, prefix, plan.chars_per_token)
            if score is None:
                skipped[plan.part.name] = why
            else:
                scores.append(score)
                parts.append(plan.part)
    except NotOffered as e:
        raise Skip(f"{e}: EPT062 judges this server from its generated tokens") from None
    if not scores:
        raise Skip(f"no part of the built-in text applies to the served vocabulary: {skipped}")
    logprobs = [v for s in scores for v in s.logprobs]
    index: dict[str, int] = {}
    unigram = unigram_loss([index.setdefault(t, len(index)) for s in scores for t in s.tokens[-len(s.logprobs):]])
    loss = mean_loss(logprobs)
    verdict = judge_loss(loss, unigram, ref.config.vocab_size if ref else None)
    evidence = {"route": scores[0].route, "loss": round(loss, 4), "unigram_loss": round(unigram, 4),
                "bound": round(verdict.bound, 4), "scored_tokens": len(logprobs), "skipped_parts": skipped,
                "parts": [{"part": s.name, "tokens": len(s.logprobs), "loss": round(mean_loss(s.logprobs), 4),
                           "chars_per_token": round(s.chars_per_token, 2)} for s in scores]}
    if ref is None:
        yield text_finding(verdict, evidence)
        return
    yield from compare_text(ctx, scores, parts, verdict, evidence)


def text_finding(verdict: Verdict, evidence: dict) -> Problem:
    if verdict.ok:
        return Problem(f"the server predicts the built-in text: {verdict.why}", severity="info", evidence=evidence)
    return Problem(f"the server talks nonsense: on the built-in text its {verdict.why}; {NEXT_ALONE}",
                   evidence=evidence)


def compare_text(ctx, scores, parts, verdict: Verdict, evidence: dict):
    """The same parts through the reference engine; the gap is the difference of the total nats each side
    spends on the same text, per server token (the two tokenizers may cut the text differently)."""
    ref_runs = [reference_side.score_text(ctx, part.text) for part in parts]
    ref_logprobs = [v for r in ref_runs for v in r.logprobs]
    ref_loss = mean_loss(ref_logprobs)
    ref_unigram = unigram_loss([i for r in ref_runs for i in r.ids])
    ref_verdict = judge_text(ref_loss, ctx.reference.config.vocab_size, ref_unigram)
    server_logprobs = [v for s in scores for v in s.logprobs]
    gap = (sum(ref_logprobs) - sum(server_logprobs)) / len(server_logprobs)   # total nats apart, per server token
    evidence.update(reference_loss=round(ref_loss, 4), reference_unigram_loss=round(ref_unigram, 4),
                    reference_bound=round(ref_verdict.bound, 4), gap_nats_per_token=round(gap, 4))
    if not ref_verdict.ok:
        yield Problem(f"the checkpoint itself fails the bound ({ref_verdict.why}): an untrained or broken model, "
                      f"not a serving fault (`llmdoctor check` judges it); the server: {verdict.why}",
                      severity="info", evidence=evidence)
    elif not verdict.ok:
        yield Problem(f"the deployment talks nonsense where its checkpoint does not: server {verdict.why}; "
                      f"reference {ref_loss:.2f} nats/token; {NEXT_WITH}", evidence=evidence)
    elif gap > GAP_WARN:
        yield Problem(f"the deployment predicts the built-in text {gap:.2f} nats/token worse than its checkpoint "
                      f"(server {verdict.why}; reference {ref_loss:.2f}): more than quantization costs",
                      severity="warning", evidence=evidence)
    else:
        yield Problem(f"the server predicts the built-in text like its checkpoint: {verdict.why}; reference "
                      f"{ref_loss:.2f} (gap {gap:+.2f} nats/token)", severity="info", evidence=evidence)


@check("EPT062", category="endpoint", severity="error", needs=("endpoint",),
       hint="a model that cannot copy a sequence it was just shown is scrambled: check the served weights "
            "(layer order, tensor layout, quantization packing)")
@asks_server
def copying(ctx: EndpointInputs):
    """In-context copying through the server: a word sequence shown once must be predicted when shown again.

    Induction is present in any trained decoder whatever its language, and needs no knowledge of the text. With
    prompt logprobs the sequence is sent twice and the second copy's loss is divided by the first's (copy ratio,
    bound 0.5; the healthy and broken ranges measured: docs/competence.md). Without them (llama.cpp, Ollama) it is
    shown twice and begun a third time: the greedy continuation must copy at least half of the words that follow
    (healthy models copy them all), and the logprobs of the copied tokens are reported where the server returns
    them. A model whose token embeddings are permuted (tied head) still copies: EPT061 and EPT063 catch it. With
    --model the reference engine takes the same test."""
    ref = reference_side.optional_reference(ctx)
    words = copy_words()
    try:
        prefix = prompt_prefix(ctx.surface, reference_side.bos_text(ref), ctx.tokenize)
        run, why = served_copy(ctx.surface, words, prefix)
    except NotOffered as e:
        run, why = None, str(e)
    if run is not None:
        yield copy_ratio_finding(ctx, ref, run, words)
        return
    greedy = completions(lambda: greedy_copy(ctx.surface, words, top_logprobs=1))
    yield greedy_copy_finding(ctx, ref, greedy, words, why)


def copy_ratio_finding(ctx, ref, run: CopyRun, words: list[str]) -> Problem:
    score = copy_score(run.logprobs, run.start, run.length)
    verdict = judge_copy(score.ratio)
    evidence = {"route": run.scored.route, "words": len(words), "tokens_per_copy": run.length,
                **{k: round(v, 4) for k, v in score.as_dict().items()}, "bound": verdict.bound}
    ref_score = reference_side.score_copy(ctx, copy_text(words)) if ref is not None else None
    if ref_score is not None:
        evidence["reference"] = {k: round(v, 4) for k, v in ref_score.as_dict().items()}
    ref_ok = None if ref_score is None else judge_copy(ref_score.ratio).ok
    return copy_problem(verdict.ok, f"{verdict.why}: second copy {score.second:.2f} nats/token, first "
                        f"{score.first:.2f}", ref_ok, evidence, ref is not None)


def greedy_copy_finding(ctx, ref, greedy: GreedyCopy, words: list[str], why: str) -> Problem:
    ok = greedy.accuracy >= MIN_GREEDY_COPY
    evidence = {"route": f"{greedy.route} greedy continuation ({why})", "expected": greedy.expected,
                "generated": greedy.generated[:400], "copied_words": greedy.matched, "bound": MIN_GREEDY_COPY,
                "copied_tokens_loss": round(mean_loss(greedy.copied_logprobs), 4) if greedy.copied_logprobs
                else None}
    ref_ok = None
    if ref is not None:
        prompt, expected = greedy_copy_prompt(words)
        text = reference_side.greedy_texts(ctx, [prompt], 2 * len(expected))[0]
        evidence["reference_copied_words"] = matched_words(expected, text)
        ref_ok = evidence["reference_copied_words"] / len(expected) >= MIN_GREEDY_COPY
    measured = (f"{greedy.matched} of the {len(greedy.expected)} words that follow the shown sequence copied "
                f"greedily (bound {MIN_GREEDY_COPY:.0%})")
    return copy_problem(ok, measured, ref_ok, evidence, ref is not None)


def copy_problem(ok: bool, measured: str, ref_ok: bool | None, evidence: dict, has_ref: bool) -> Problem:
    """ref_ok: the reference passed the same test (None: no reference, or it could not take the test)."""
    if ref_ok is False:
        return Problem(f"the checkpoint itself cannot copy (an untrained or broken model, not a serving fault: "
                       f"`llmdoctor check` judges it); the server: {measured}", severity="info", evidence=evidence)
    if not ok:
        where = "where its checkpoint can" if ref_ok else "a sequence it was just shown"
        return Problem(f"the server cannot copy {where}: {measured}; {next_step(has_ref)}",
                       evidence=evidence)
    return Problem(f"the server copies in context: {measured}", severity="info", evidence=evidence)


@check("EPT063", category="endpoint", severity="error", needs=("endpoint",),
       hint="a model that cannot continue 1, 2, 3 ... talks nonsense: check the served weights, their "
            "quantization and conversion")
@asks_server
def sequences(ctx: EndpointInputs):
    """Greedy continuations of well-known sequences (counting, the alphabet, weekdays, months) through the server.

    Any trained model continues "1, 2, 3, 4, 5, 6," with 7; a broken one answers with unrelated tokens or locks
    into a loop of one or two words from the first step ("piece in piece in"), which the evidence names. At
    least half of the six sequences must be continued with the right word (healthy models continue all six;
    the weekdays and months are English, the numbers and letters are not). Needs only generated text, so every
    server takes it. With --model the reference engine continues the same prompts."""
    runs = completions(lambda: continue_sequences(ctx.surface))
    right = sum(r.ok for r in runs)
    evidence = {"continued": right, "of": len(runs), "bound": MIN_SEQUENCES,
                "sequences": [{"prompt": r.prompt, "expected": r.expected, "server": r.generated, "ok": r.ok,
                               "loops": r.loops} for r in runs]}
    loops = sum(r.loops for r in runs)
    measured = (f"continued {right} of {len(runs)} well-known sequences with the right word (bound "
                f"{MIN_SEQUENCES}){f'; {loops} locked into a one- or two-word loop' if loops else ''}")
    ref_ok = None
    if reference_side.optional_reference(ctx) is not None:
        texts = reference_side.greedy_texts(ctx, [r.prompt for r in runs], SEQUENCE_TOKENS)
        ref_right = sum(Continued(r.prompt, r.expected, t).ok for r, t in zip(runs, texts))
        evidence["reference_continued"] = ref_right
        for item, text in zip(evidence["sequences"], texts):
            item["reference"] = text
        ref_ok = ref_right >= MIN_SEQUENCES
    if ref_ok is False:
        yield Problem(f"the checkpoint itself cannot continue them (an untrained or broken model, not a serving "
                      f"fault: `llmdoctor check` judges it); the server {measured}", severity="info",
                      evidence=evidence)
    elif right < MIN_SEQUENCES:
        where = " where its checkpoint can" if ref_ok else ""
        yield Problem(f"the server talks nonsense{where}: it {measured}, e.g. {runs[0].prompt!r} -> "
                      f"{runs[0].generated!r}; {next_step(ref_ok is not None)}", evidence=evidence)
    else:
        yield Problem(f"the server {measured}", severity="info", evidence=evidence)
