"""The CTX engine run: the distance prompt (probes/competence/distance.py) prefilled in chunks through the
paged KV cache, so no step holds more than CHUNK_LOGITS_BYTES of logits nor a [chunk, context] attention block
larger than chunk x context per head: memory grows linearly with the context, never with its square. Each chunk
is one engine step after the cached ones (a streaming engine: one pass over the weights per chunk, so chunks
are larger there). Only the per-token log-probabilities are kept."""
from __future__ import annotations

import time
from dataclasses import dataclass

from checks.catalogue.registry import CannotRun, Skip
from checks.shared.chunked_prefill import chunk_tokens, chunked_logprobs

from probes.competence.distance import DistancePrompt, DistanceScore, distance_prompt, distance_score

KEY = "context"
FAMILY = "CTX"                      # the checks that read this run
DEFAULT_TOKENS = 4096               # full `check`: min(declared, 4096) (docs/context.md states the cost)


@dataclass
class ContextRun:
    tokens: int                     # positions asked for (after the cap at the declared maximum)
    asked: int | None               # --context N as given (None: the default)
    declared: int                   # max_position_embeddings
    prompt: DistancePrompt
    score: DistanceScore
    chunk: int                      # tokens per prefill step
    seconds: float


def reads(quick: bool, context: int | None, asked: set[str]) -> bool:
    """Whether this run reads at distance: a full check does; under --quick only when --context N is given or
    a selector names a CTX check (CTX001, CTX, the context category: `asked`, the ids a selector other than
    ALL chose). The runner sizes the memory plan by the same rule."""
    return not quick or context is not None or any(i.startswith(FAMILY) for i in asked)


def reading_tokens(declared: int, context: int | None) -> int:
    """The tokens read to: --context N, else min(declared, DEFAULT_TOKENS); never past the declared maximum
    (the runner refuses a larger --context before loading)."""
    return min(context if context is not None else DEFAULT_TOKENS, declared)


def asked_tokens(ctx) -> tuple[int, int | None, int]:
    """(tokens to read to, --context as given, declared); Skip under --quick when the run was not asked to read
    (reads: the full run costs a prefill of up to 4096 tokens)."""
    declared = int(ctx.engine.config.max_position_embeddings)
    asked = ctx.context_tokens
    if not reads(ctx.quick, asked, ctx.asked):
        raise Skip("--quick skips the long-context reading (run `check --context N`, select a CTX check or run "
                   f"a full check to read up to min(declared, {DEFAULT_TOKENS}) tokens)")
    return reading_tokens(declared, asked), asked, declared


def context_run(ctx) -> ContextRun:
    """The run (once per check run)."""
    if KEY in ctx.state:
        return ctx.state[KEY]
    tokens, asked, declared = asked_tokens(ctx)
    engine = ctx.engine
    try:
        prompt = distance_prompt(ctx.tokenizer, engine.config.vocab_size, tokens)
    except Exception as e:          # a tokenizer that cannot encode plain text is GLD001's and TOK's finding
        raise CannotRun(f"the built-in text cannot be encoded ({type(e).__name__}: {e})") from None
    if prompt is None:
        raise CannotRun(f"no distance prompt fits {tokens} tokens with this tokenizer (too short a context, too few "
                   "ordinary word pieces or no applicable built-in text)")
    room = engine.cache.allocator.num_free * engine.cache.block_size
    if room < len(prompt.ids):
        raise CannotRun(f"the KV cache has room for {room} tokens, the prompt needs {len(prompt.ids)}")
    chunk = chunk_tokens(engine.config.vocab_size, bool(getattr(engine, "streaming", False)))
    started = time.perf_counter()
    far = chunked_logprobs(engine, prompt.ids, chunk)
    near = chunked_logprobs(engine, prompt.near, chunk)
    run = ContextRun(tokens, asked, declared, prompt, distance_score(prompt, far, near), chunk,
                     time.perf_counter() - started)
    ctx.state[KEY] = run
    return run
