"""CTX001-CTX003: the model read at distance (runs.py), judged with the competence bounds."""
from __future__ import annotations

from checks.shared.standing import standing
from checks.long_context.boundaries import boundaries, design_window, nearest
from checks.long_context.runs import context_run
from checks.catalogue.registry import Problem, check
from probes.competence.bounds import judge_copy, judge_passage
from probes.competence.distance import reach


def copy_reach(run) -> tuple[int, int | None]:
    """(largest distance read before the first failure, first distance not read or None)."""
    return reach((pair.distance, judge_copy(score.ratio).ok) for pair, score in zip(run.prompt.pairs, run.score.copies))


def copy_rows(run) -> list[dict]:
    return [{"distance": p.distance, "copy_ratio": round(s.ratio, 3), "first_copy_loss": round(s.first, 3),
             "second_copy_loss": round(s.second, 3)} for p, s in zip(run.prompt.pairs, run.score.copies)]


def passage_rows(run) -> list[dict]:
    return [{"position": p.start, "loss": round(f, 3), "near_loss": round(n, 3)}
            for p, f, n in zip(run.prompt.passages, run.score.far_loss, run.score.near_loss)]


def boundary_text(ctx, reads: int, fails: int) -> tuple[str, dict]:
    engine = ctx.engine
    found = nearest(boundaries(ctx.raw_config, list(engine.windows)), reads, fails)
    if found is None:
        return "; the config declares no boundary near it", {}
    return f"; the config puts {found.name} at {found.tokens}", {"boundary": found.name,
                                                                 "boundary_tokens": found.tokens}


def reads_to_window(design, reads: int, fails: int, evidence: dict) -> Problem:
    """A window declared for every layer is where reading stops by design (Mistral-7B-v0.1, Phi-3-mini-4k):
    named as the model's boundary, a warning (positions past it are declared, never read back), not an error."""
    return Problem(f"the model reads to the declared window: copies read to {reads} tokens apart, not {fails}, "
                   f"and its config puts sliding_window {design.tokens} on all {design.layers} layers (its design: "
                   f"{design.declared} positions declared, nothing reads further back than {design.tokens})",
                   severity="warning", evidence={**evidence, "design_window": design.tokens,
                                                 "boundary": "sliding_window (declared for all layers)",
                                                 "boundary_tokens": design.tokens})


@check("CTX001", category="context", severity="error", needs=("engine", "tokenizer"),
       hint="Compare the config's sliding_window / layer_types / rope settings with the original checkpoint's "
            "(the named boundary is the first suspect); a serving stack: its window and rope flags.")
def copies_at_distance(ctx):
    """The model copies a sequence shown N/4, N/2, 3N/4 and ~N tokens earlier, as it does 64 tokens earlier.

    The copy test (CMP002) with natural text between the two copies: a random sequence of word pieces is
    shown, then again after up to N tokens of the built-in text. A trained decoder predicts the second copy from
    the first at any distance its attention reaches (copy ratio < 0.5, the CMP002 bound; healthy SmolLM2 and
    Gemma 3 270M: 0.04-0.23 up to 4096, docs/context.md). A window shorter than the declared context, a window
    applied to every layer, swapped local/global rope bases or a changed rope base read well near and not far.
    The finding names the largest distance read, the first not read and the config's boundary there (sliding
    window, chunk size, original_max_position_embeddings). A window the config declares for every layer, with
    layers enough to stack to the declared length (Mistral-7B-v0.1, Phi-3-mini-4k), is the model's design:
    reading to it is a warning naming it, stopping before it an error. Runs at min(declared, 4096) tokens by default,
    --context N to choose, skipped under --quick. Untrained and sub-50M models are measured, not judged.
    """
    run = context_run(ctx)
    reads, fails = copy_reach(run)
    if fails is None:
        return
    pair = next(i for i, p in enumerate(run.prompt.pairs) if p.distance == fails)
    verdict = judge_copy(run.score.copies[pair].ratio)
    where, more = boundary_text(ctx, reads, fails)
    evidence = {"reads_to": reads, "fails_at": fails, "tokens": run.tokens, "copies": copy_rows(run), **more}
    stand = standing(ctx)
    if stand.severity is not None:
        yield Problem(f"{stand.prefix}copies read to {reads} tokens apart, not {fails} ({verdict.why})",
                      severity=stand.severity, evidence={**evidence, **stand.evidence})
        return
    design = design_window(ctx.raw_config, list(ctx.engine.windows))
    if design is not None and fails > design.tokens:
        yield reads_to_window(design, reads, fails, evidence)
        return
    if design is not None:
        where = (f"; it stops before the sliding_window of {design.tokens} its config declares for all "
                 f"{design.layers} layers")
    if reads == 0:
        yield Problem(f"the model does not copy a sequence even {fails} tokens back with text between ({verdict.why})"
                      f"{where}", evidence=evidence)
        return
    yield Problem(f"the model stops reading between {reads} and {fails} tokens: a sequence {fails} tokens back is "
                  f"not copied ({verdict.why}; {run.score.copies[0].ratio:.2f} at {run.prompt.pairs[0].distance})"
                  f"{where}", evidence=evidence)


@check("CTX002", category="context", severity="error", needs=("engine", "tokenizer"),
       hint="Positions past what the rope was trained for: restore the rope scaling (type, factor, "
            "original_max_position_embeddings) or lower max_position_embeddings to what the model reads.")
def passage_far_out(ctx):
    """A natural passage read far out costs about what it costs near position 0.

    Passages of the built-in text (never in the filler) are placed at increasing positions up to N and read
    again near position 0 behind the same 16 filler tokens. A model whose positions hold reads them alike
    (far/near loss ratio < 1.6; healthy models 0.9-1.3); a rope read past the positions it was set up for (a
    dropped rope scaling, a raised max_position_embeddings, a wrong rope base) loses the thread there, whatever
    the copies say. Same run, default and --quick rule as CTX001.
    """
    run = context_run(ctx)
    bad = [(p, f, n) for p, f, n in zip(run.prompt.passages, run.score.far_loss, run.score.near_loss)
           if not judge_passage(f, n).ok]
    if not bad:
        return
    first, far, near = bad[0]
    good = [p.start for p, f, n in zip(run.prompt.passages, run.score.far_loss, run.score.near_loss)
            if judge_passage(f, n).ok and p.start < first.start]
    reads = good[-1] if good else 0
    where, more = boundary_text(ctx, reads, first.start)
    evidence = {"reads_to": reads, "fails_at": first.start, "passages": passage_rows(run), **more}
    stand = standing(ctx)
    prefix, severity = (stand.prefix, stand.severity) if stand.severity is not None else ("", None)
    yield Problem(f"{prefix}a passage at position {first.start} reads worse than near position 0: "
                  f"{judge_passage(far, near).why}{where}", severity=severity,
                  evidence={**evidence, **stand.evidence} if severity else evidence)


@check("CTX003", category="context", severity="info", needs=("engine", "tokenizer"),
       hint="Nothing to fix: the numbers for the record (pass --context N to read further).")
def context_reach(ctx):
    """How far the model was read, with every copy ratio and passage loss, and what it cost.

    The measurement CTX001 and CTX002 judge, reported whatever they find: the tokens read, the distances, each
    pair's copy ratio, each passage's far and near loss, the config's boundaries and the wall time of the run
    (chunked prefill through the paged cache).
    """
    run = context_run(ctx)
    reads, fails = copy_reach(run)
    asked = f" (--context {run.asked} capped at the declared {run.declared})" if run.asked and \
        run.asked > run.declared else ""
    state = f"copies read at every distance up to {reads}" if fails is None else \
        f"copies read to {reads} tokens apart, not {fails}"
    bounds = [{"name": b.name, "tokens": b.tokens} for b in boundaries(ctx.raw_config, list(ctx.engine.windows))]
    yield Problem(f"read {len(run.prompt.ids)} tokens{asked}: {state}; copy ratios "
                  f"{', '.join(f'{s.ratio:.2f}' for s in run.score.copies)}; {run.seconds:.1f} s",
                  evidence={"tokens": len(run.prompt.ids), "declared": run.declared, "chunk": run.chunk,
                            "seconds": round(run.seconds, 2), "copies": copy_rows(run),
                            "passages": passage_rows(run), "boundaries": bounds})
