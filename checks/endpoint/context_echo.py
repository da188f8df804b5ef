"""The echo route of `probe endpoint --context N`: where a server returns prompt logprobs, each
distance is one scored prompt (probes/endpoint/context_probe.py copy_prompts), nothing generated, and the copy
score of the planted words' second showing says whether the served model still reads that far. With --model the
reference engine scores the same token ids (the server's own, from its /tokenize, when they differ from the
reference tokenizer's) through its paged cache in chunks, so the two copy scores sit side by side per distance.

Which route: one small echo request decides (probes/endpoint/prompt_logprobs.py: llama.cpp and Ollama have no
prompt logprobs; llama-cpp-python needs the BOS text of a model that adds none, which only --model names)."""
from __future__ import annotations

from checks.endpoint.competence_reference import bos_text, optional_reference
from checks.shared.chunked_prefill import chunk_tokens, chunked_logprobs
from probes.endpoint.client import EndpointError
from probes.endpoint.context_probe import ECHO, CopyPrompt, Reading, echo_reading, pair_score
from probes.endpoint.prompt_logprobs import NotOffered, prompt_prefix, served_text_logprobs

PROBE_TEXT = "The planted words are read back from the prompt."


def echo_prefix(ctx) -> tuple[str | None, str]:
    """(what to send before each prompt, "") when the server scores prompts, else (None, why not): one small echo
    request (none where the server kind is known to have no prompt logprobs)."""
    try:
        prefix = prompt_prefix(ctx.surface, bos_text(optional_reference(ctx)), ctx.tokenize)
        scored = served_text_logprobs(ctx.surface, PROBE_TEXT, prefix)
    except NotOffered as e:
        return None, str(e)
    except EndpointError as e:
        if e.status is None or e.status >= 500:
            raise
        return None, f"the echo request was refused: {e}"
    start = scored.text_start(PROBE_TEXT)
    if start is None or any(v is None for v in scored.logprobs[start + 1:]):
        return None, f"{scored.route} does not give a logprob for every token of the text sent"
    return prefix, ""


def server_echo(ctx, prompts: list[CopyPrompt], prefix: str, limit_in) -> list[Reading]:
    """One scored prompt per distance; a refusal (a context error names the limit) is kept as an error reading."""
    out = []
    for p in prompts:
        try:
            out.append(echo_reading(p, served_text_logprobs(ctx.surface, p.prompt, prefix)))
        except (EndpointError, NotOffered) as e:
            status = getattr(e, "status", 400)
            if status is None or (status >= 500 and limit_in(str(e)) is None):
                raise
            out.append(Reading(p.distance, 0, "", None, error=str(e), route=ECHO))
    return out


def scored_ids(ctx, text: str) -> tuple[list[int], str]:
    """(the ids the server fed its model for `text`, whose count): the server's own (/tokenize) when it says and
    the reference can read them, else the reference tokenizer's (the same ids wherever the tokenizers agree)."""
    ids = [int(t) for t in ctx.reference.prompt_ids(text)]
    try:
        served = ctx.tokenize(text)
    except EndpointError:
        served = None
    vocab = ctx.reference.config.vocab_size
    if served and served != ids and all(0 <= t < vocab for t in served):
        return served, "the server's /tokenize"
    return ids, "the reference tokenizer's" if not served else "the reference's (equal to the server's /tokenize)"


def reference_echo(ctx, prompts: list[CopyPrompt], prefix: str) -> list[Reading]:
    """The reference engine's prompt logprobs of the same token ids, scored the same way."""
    ref, engine = ctx.reference, ctx.engine()
    chunk = chunk_tokens(ref.config.vocab_size, bool(getattr(engine, "streaming", False)))
    out = []
    for p in prompts:
        ids, source = scored_ids(ctx, prefix + p.prompt)
        if len(ids) > ref.max_context:
            out.append(Reading(p.distance, 0, "", len(ids), error="past the checkpoint's max_position_embeddings",
                               route=ECHO))
            continue
        logprobs = chunked_logprobs(engine, ids, chunk)                   # logprobs[i] scores ids[i + 1]
        score, why = pair_score([ref.tokenizer.decode([i]) for i in ids], logprobs, p.planted)
        out.append(Reading(p.distance, 0, why or f"ids: {source}", len(ids), copy=score, route=ECHO))
    return out
