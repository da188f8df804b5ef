"""EPT121-EPT124: how far a live server reads (`probe endpoint URL --context N`, issue 40 ask 3). The planted
words are retrieved behind increasing filler (probes/endpoint/context_probe.py); with --model the reference
engine answers the same prompts (greedy, chunked prefill through its paged cache), so a server that stops
reading before its checkpoint does is told apart from a checkpoint that never read that far."""
from __future__ import annotations

import torch

from checks.endpoint.context import EndpointContext, asks_server
from checks.shared.chunked_prefill import chunk_tokens
from checks.registry import Problem, Skip, check
from probes.endpoint.client import EndpointError
from probes.endpoint.context_probe import (EXPECTED_WORDS, MIN_MATCHED, Reading, chars_per_token, read_back,
                                           retrievals)
from probes.endpoint.surface import CONTEXT_ERRORS

CUT_FRACTION = 0.9       # a prompt counted below this share of its expected tokens was cut on the way
NEW_TOKENS = 12


def asked(ctx: EndpointContext) -> int:
    tokens = getattr(ctx, "context_tokens", None)
    if tokens is None:
        raise Skip("pass --context N to read the server at distance")
    return tokens


def limit_in(error: str) -> int | None:
    for pattern in CONTEXT_ERRORS:
        match = pattern.search(error)
        if match:
            return int(match.group(1))
    return None


def server_readings(ctx: EndpointContext) -> tuple[float, list[Reading]]:
    """(characters per token, one Reading per distance), asked once."""
    def run():
        tokens, surface = asked(ctx), ctx.surface
        cpt = chars_per_token(surface)
        out = []
        for r in retrievals(tokens, cpt):
            try:
                answer = surface.completion(r.prompt, max_tokens=NEW_TOKENS)
                out.append(Reading(r.distance, read_back(r.expected, answer.text), answer.text, answer.prompt_tokens))
            except EndpointError as e:
                if e.status is None or (e.status >= 500 and limit_in(str(e)) is None):
                    raise
                out.append(Reading(r.distance, 0, "", None, error=str(e)))
        return cpt, out
    return ctx.ask("context:server", run)


def greedy(engine, ids: list[int], new: int) -> list[int]:
    """Greedy continuation of ids: chunked prefill, then one decode step per token."""
    chunk = chunk_tokens(engine.config.vocab_size, bool(getattr(engine, "streaming", False)))
    out: list[int] = []
    with engine.scratch() as (seq,):
        for at in range(0, len(ids), chunk):
            logits = engine.prefill([seq], [ids[at:at + chunk]])                  # [1, vocab]: the last row
        for _ in range(new):
            out.append(int(torch.argmax(logits[0])))
            logits = engine.decode([seq], [out[-1]])
    return out


def reference_readings(ctx: EndpointContext, cpt: float) -> list[Reading]:
    """The reference engine on the same prompts (the server's sizing), asked once."""
    def run():
        ref, engine = ctx.reference, ctx.engine()
        out = []
        for r in retrievals(asked(ctx), cpt):
            ids = ref.prompt_ids(r.prompt)
            if len(ids) + NEW_TOKENS > ref.max_context:
                out.append(Reading(r.distance, 0, "", len(ids), error="past the checkpoint's max_position_embeddings"))
                continue
            text = ref.tokenizer.decode(greedy(engine, ids, NEW_TOKENS))
            out.append(Reading(r.distance, read_back(r.expected, text), text, len(ids)))
        return out
    if "context:reference" not in ctx.state:
        ctx.state["context:reference"] = run()
    return ctx.state["context:reference"]


def rows(readings: list[Reading]) -> list[dict]:
    return [{"distance": r.distance, "matched": r.matched, "prompt_tokens": r.prompt_tokens,
             "continuation": r.text[:80], **({"error": r.error[:200]} if r.error else {})} for r in readings]


def reach(readings: list[Reading]) -> tuple[int, int | None]:
    reads = 0
    for r in readings:
        if not r.reads:
            return reads, r.distance
        reads = r.distance
    return reads, None


@check("EPT121", category="endpoint", severity="info", needs=("endpoint",),
       hint="Nothing to fix: what the server says about its context, for the record.")
@asks_server
def context_claims(ctx: EndpointContext):
    """What the server claims about its context: /props n_ctx (llama.cpp), max_model_len (vLLM), num_ctx or
    context_length (Ollama /api/show), and the trained length /v1/models' meta names.

    Claims are what `probe endpoint --context N` (EPT122, EPT123) holds the server's reading against.
    """
    asked(ctx)
    server = ctx.ask("context", lambda: ctx.surface.context())
    meta = ctx.ask("context:models", lambda: ctx.surface.client.get("/v1/models"))
    trained = [m.get("meta", {}).get("n_ctx_train") for m in (meta.get("data") or [])
               if isinstance(m, dict) and isinstance(m.get("meta"), dict)] if isinstance(meta, dict) else []
    claim = server.max_context if server else None
    source = f" ({server.source})" if server else ""
    train = f"; trained length {trained[0]} (/v1/models meta.n_ctx_train)" if trained and trained[0] else ""
    yield Problem(f"the server claims a context of {claim if claim else 'unknown'}{source}{train}",
                  evidence={"max_context": claim, "source": server.source if server else None,
                            "rope": server.rope if server else {}, "n_ctx_train": trained[0] if trained else None})


@check("EPT122", category="endpoint", severity="error", needs=("endpoint",),
       hint="Compare the server's rope flags (--rope-freq-base, --rope-scaling, --yarn-*), its window and KV cache "
            "settings with the model's config; a proxy in front of it must pass long prompts whole.")
@asks_server
def reads_at_distance(ctx: EndpointContext):
    """The server continues words planted N/4, N/2, 3N/4 and ~N tokens back, as it does 64 tokens back.

    Words are shown, then filler of the built-in text, then begun again; greedy decoding continues them at any
    distance the served model reads (4 words back in order; 3 at least). A wrong rope base or scaling flag, a
    window the model was not trained with, or a prompt cut in the middle stop it short. With --model the
    reference engine answers the same prompts: a server that stops before its checkpoint does is an error
    naming the distance; alone, a server that reads near and not far within the context it accepted is one.
    """
    cpt, served = server_readings(ctx)
    evidence = {"chars_per_token": round(cpt, 3), "server": rows(served)}
    served = [r for r in served if not r.error]     # prompts the server refused are EPT123's (its limit)
    reads, fails = reach(served)
    try:
        reference = reference_readings(ctx, cpt)
    except Exception as e:          # no --model (ResourceError), or a reference that cannot load
        reference, evidence["reference"] = None, f"not compared: {' '.join(str(e).split())[:200]}"
    if reference is not None:
        evidence["reference"] = rows(reference)
        ref_reads, ref_fails = reach(reference)
        if fails is not None and (ref_fails is None or ref_fails > fails):
            matched = next(r.matched for r in served if r.distance == fails)
            yield Problem(f"the server stops reading at {fails} tokens back where its checkpoint reads to "
                          f"{ref_reads}: {matched} of {EXPECTED_WORDS} planted words continued (the server reads to "
                          f"{reads})", evidence={**evidence, "reads_to": reads, "fails_at": fails})
        return
    if served and not served[0].reads:
        raise Skip(f"the server does not continue the planted words even {served[0].distance} tokens back and no "
                   f"--model says whether its checkpoint does (EPT06x judge whether it reads at all): "
                   f"{served[0].text[:80]!r}")
    if fails is not None:
        yield Problem(f"the server reads planted words {reads} tokens back, not {fails} (fewer than {MIN_MATCHED} of "
                      f"{EXPECTED_WORDS} continued)", evidence={**evidence, "reads_to": reads, "fails_at": fails})


@check("EPT123", category="endpoint", severity="warning", needs=("endpoint",),
       hint="Start the server with a context as long as you need (llama.cpp -c, vLLM --max-model-len, Ollama "
            "num_ctx) and pass long prompts whole (no truncation, no context shift, no proxy cut).")
@asks_server
def enforced_limit(ctx: EndpointContext):
    """The server takes prompts as long as asked, whole: no HTTP 400 below N, no silent cut.

    Each long prompt's usage.prompt_tokens is compared with the reference's count (--model) or with the server's
    own count of the text sent (/tokenize, llama.cpp and vLLM): a count under 90 % of it means the prompt was cut
    on the way (a context shift, Ollama's num_ctx, a proxy that drops the middle). A refusal names the real
    limit.
    """
    cpt, served = server_readings(ctx)
    refused = [r for r in served if r.error]
    limit = None
    if refused:
        claimed = ctx.ask("context", lambda: ctx.surface.context())
        limit = limit_in(refused[0].error) or (claimed.max_context if claimed else None)
    if refused and (limit is None or limit < asked(ctx)):     # at or past N: our prompt sizing, not the server
        real = f": its context is {limit}" if limit else ""
        yield Problem(f"the server refuses the prompt planting words {refused[0].distance} tokens back{real} "
                      f"(asked {asked(ctx)})",
                      evidence={"limit": limit, "error": refused[0].error[:300], "server": rows(served)})
    prompts = {r.distance: r.prompt for r in retrievals(asked(ctx), cpt)}
    try:
        expected = {r.distance: r.prompt_tokens for r in reference_readings(ctx, cpt)}
        source = "the reference's count"
    except Exception:           # no --model: the server's own count of what was sent (/tokenize), when it has one
        expected = {d: len(ids) for d, ids in ((d, ctx.tokenize(text)) for d, text in prompts.items()) if ids}
        source = "the server's /tokenize count of what was sent"
    if not expected:
        raise Skip("no count to compare usage.prompt_tokens with: no --model and no /tokenize route")
    for r in served:
        want = expected.get(r.distance)
        if r.error or r.prompt_tokens is None or not want:
            continue
        if r.prompt_tokens < CUT_FRACTION * want:
            yield Problem(f"a prompt of {want} tokens ({source}) reached the model as {r.prompt_tokens}: cut on "
                          f"the way", evidence={"expected_tokens": want, "prompt_tokens": r.prompt_tokens,
                                                "distance": r.distance, "server": rows(served)})
            return
