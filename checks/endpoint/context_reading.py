"""EPT121-EPT123: how far a live server reads (`probe endpoint URL --context N`). Two routes
(probes/endpoint/context_probe.py): where the server gives prompt logprobs (echo), the copy score of planted words
shown again behind increasing filler (checks/endpoint/context_echo.py); elsewhere the planted words retrieved
greedily behind it. With --model the reference engine takes the same prompts (chunked prefill through its paged
cache), so a server that stops reading before its checkpoint does is told apart from a checkpoint that never read
that far. The findings name the route."""
from __future__ import annotations

from dataclasses import dataclass

from checks.endpoint import context_echo
from checks.catalogue.inputs import ResourceError
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.shared.chunked_prefill import chunk_tokens
from checks.catalogue.registry import Problem, Skip, check
from probes.endpoint.client import EndpointError
from probes.endpoint.context_probe import (ECHO, EXPECTED_WORDS, GREEDY, MIN_MATCHED, Reading, chars_per_token,
                                           copy_prompts, read_back, retrievals)
from probes.endpoint.surface import CONTEXT_ERRORS
from probes.competence.bounds import MAX_COPY_RATIO
from probes.competence.distance import reach
from reference_engine.generate.sampling_params import SamplingParams

CUT_FRACTION = 0.9       # a prompt counted below this share of its expected tokens was cut on the way
NEW_TOKENS = 12
COPY_GAP = 0.75          # echo route with --model: nats/token the server's second showing may cost over its
                         # checkpoint's (SmolLM2 Q4_1 on llama-cpp-python: 0.01-0.02; --rope_freq_base 1000: 1.3-1.6
                         # from 146 tokens back, where its copy ratio, 0.20, still passes the bound)


def asked(ctx: EndpointInputs) -> int:
    tokens = ctx.context_tokens
    if tokens is None:
        raise Skip("pass --context N to read the server at distance")
    return tokens


def limit_in(error: str) -> int | None:
    for pattern in CONTEXT_ERRORS:
        match = pattern.search(error)
        if match:
            return int(match.group(1))
    return None


@dataclass
class Served:
    chars_per_token: float
    route: str                      # ECHO or GREEDY
    why_greedy: str                 # why the server was not read through its prompt logprobs ("" on ECHO)
    prefix: str                     # sent before each prompt (echo on llama-cpp-python: a BOS text)
    prompts: dict[int, str]         # distance -> the prompt sent
    readings: list[Reading]


def server_readings(ctx: EndpointInputs) -> Served:
    """The server read at every distance, by the route it allows, asked once."""
    def run():
        tokens, surface = asked(ctx), ctx.surface
        cpt = chars_per_token(surface)
        prefix, why = context_echo.echo_prefix(ctx)
        if prefix is not None:
            prompts = copy_prompts(tokens, cpt)
            readings = context_echo.server_echo(ctx, prompts, prefix, limit_in)
            return Served(cpt, ECHO, "", prefix, {p.distance: p.prompt for p in prompts}, readings)
        out = []
        for r in retrievals(tokens, cpt):
            try:
                answer = surface.completion(r.prompt, max_tokens=NEW_TOKENS)
                out.append(Reading(r.distance, read_back(r.expected, answer.text), answer.text, answer.prompt_tokens))
            except EndpointError as e:
                if e.status is None or (e.status >= 500 and limit_in(str(e)) is None):
                    raise
                out.append(Reading(r.distance, 0, "", None, error=str(e)))
        return Served(cpt, GREEDY, why, "", {r.distance: r.prompt for r in retrievals(tokens, cpt)}, out)
    return ctx.ask("context:server", run)


def greedy(engine, ids: list[int], new: int) -> list[int] | None:
    """`new` greedy tokens after ids from the engine's own generate, past EOS too (the server is read for as
    many), the prompt prefilled in chunks as the CTX run's (checks/shared/chunked_prefill.py) so no step holds
    more than one chunk's attention block; None when the reference's KV cache cannot hold the prompt."""
    chunk = chunk_tokens(engine.config.vocab_size, bool(getattr(engine, "streaming", False)))
    out = engine.generate(ids, SamplingParams(max_new_tokens=new, ignore_eos=True), max_prefill_tokens=chunk)[0]
    return None if out.finish_reason == "kv_cache_full" else out.token_ids


def reference_readings(ctx: EndpointInputs, served: Served) -> list[Reading]:
    """The reference engine on the same prompts by the same route (the server's sizing), asked once."""
    def run():
        if served.route == ECHO:
            return context_echo.reference_echo(ctx, copy_prompts(asked(ctx), served.chars_per_token), served.prefix)
        ref, engine = ctx.reference, ctx.engine()
        out = []
        for r in retrievals(asked(ctx), served.chars_per_token):
            ids = ref.prompt_ids(r.prompt)
            if len(ids) + NEW_TOKENS > ref.max_context:
                out.append(Reading(r.distance, 0, "", len(ids), error="past the checkpoint's max_position_embeddings"))
                continue
            continuation = greedy(engine, ids, NEW_TOKENS)
            if continuation is None:
                out.append(Reading(r.distance, 0, "", len(ids), error="past the reference's KV cache"))
                continue
            text = ref.tokenizer.decode(continuation)
            out.append(Reading(r.distance, read_back(r.expected, text), text, len(ids)))
        return out
    if "context:reference" not in ctx.state:
        ctx.state["context:reference"] = run()
    return ctx.state["context:reference"]


def rows(readings: list[Reading]) -> list[dict]:
    out = []
    for r in readings:
        row = {"distance": r.distance, "prompt_tokens": r.prompt_tokens}
        if r.route == ECHO:
            row.update({k: round(v, 4) for k, v in r.copy.as_dict().items()} if r.copy else {})
            row.update({"note": r.text[:120]} if r.text else {})
            row.update({"echoed_whole": r.whole} if r.whole is not None else {})
        else:
            row.update(matched=r.matched, continuation=r.text[:80])
        out.append({**row, **({"error": r.error[:200]} if r.error else {})})
    return out


def measured(r: Reading) -> str:
    """What one reading saw, in words."""
    if r.route == GREEDY:
        return f"{r.matched} of {EXPECTED_WORDS} planted words continued (reading: {MIN_MATCHED})"
    if r.copy is None:
        return r.text
    return (f"copy ratio {r.copy.ratio:.2f} (bound {MAX_COPY_RATIO:.2f}): the second showing's loss "
            f"{r.copy.second:.2f} nats/token, {r.copy.first:.2f} at the first")


def served_reach(readings: list[Reading], reference: list[Reading] | None = None) -> tuple[int, int | None]:
    """reach() over the readings; with the reference's echo readings, a distance where the server's copy costs
    COPY_GAP more than its checkpoint's is not read."""
    ref = {r.distance: r for r in reference or []}
    return reach((r.distance, r.reads and not lags(r, ref.get(r.distance))) for r in readings)


def lags(r: Reading, ref: Reading | None) -> bool:
    """The server's second showing costs more than COPY_GAP nats/token over the checkpoint's on the same ids."""
    return (r.copy is not None and ref is not None and ref.copy is not None
            and r.copy.second - ref.copy.second > COPY_GAP)


@check("EPT121", category="endpoint", severity="info", needs=("endpoint",),
       hint="Nothing to fix: what the server says about its context, for the record.")
@asks_server
def context_claims(ctx: EndpointInputs):
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
def reads_at_distance(ctx: EndpointInputs):
    """The server reads words planted N/4, N/2, 3N/4 and ~N tokens back, as it does 64 tokens back.

    Where the server gives prompt logprobs (vLLM, TGI, llama-cpp-python: echo), the words are shown, then filler
    of the built-in text, then shown again, and the second showing's loss is divided by the first's (the copy
    ratio, bound 0.5 at any distance as in the competence family; healthy ~0.1, ~1 where the model no longer sees
    the first showing). Elsewhere (llama.cpp, Ollama) they are shown, then filler, then begun again, and greedy
    decoding must continue them (4 words back in order; 3 at least). A wrong rope base or scaling flag, a window
    the model was not trained with, or a prompt cut in the middle stop it short. With --model the reference
    engine takes the same prompts (the same token ids on the echo route, where a second showing that costs the
    server 0.75 nats/token more than its checkpoint is not read either: a rope base off by 100x still copies
    at a ratio of 0.2 there): a server that stops before its checkpoint does is an error naming the distance;
    alone, a server that reads near and not far within the context it accepted is one. The finding names the
    route.
    """
    got = server_readings(ctx)
    evidence = {"route": got.route, "chars_per_token": round(got.chars_per_token, 3), "server": rows(got.readings),
                **({"why_greedy": got.why_greedy} if got.why_greedy else {})}
    served = [r for r in got.readings if not r.error]     # prompts the server refused are EPT123's (its limit)
    reads, fails = served_reach(served)
    route = f" (route: {got.route})"
    try:
        reference = reference_readings(ctx, got)
    except ResourceError as e:      # no --model, or a reference whose engine cannot load
        reference, evidence["reference"] = None, f"not compared: {' '.join(str(e).split())[:200]}"
    evidence.update(reads_to=reads, fails_at=fails)
    if reference is not None:
        evidence["reference"] = rows(reference)
        ref_reads, ref_fails = served_reach(reference)
        reads, fails = served_reach(served, reference)
        evidence.update(reads_to=reads, fails_at=fails)
        if fails is not None and (ref_fails is None or ref_fails > fails):
            failed = next(r for r in served if r.distance == fails)
            ref_copy = next((r.copy for r in reference if r.distance == fails), None)
            beside = (f"; the checkpoint's {ref_copy.second:.2f} nats/token on the same ids (ratio "
                      f"{ref_copy.ratio:.2f})" if failed.copy and ref_copy else "")
            yield Problem(f"the server stops reading at {fails} tokens back where its checkpoint reads to "
                          f"{ref_reads}: {measured(failed)}{beside} (the server reads to {reads}){route}",
                          evidence=evidence)
        else:
            yield Problem(f"the server reads as far as its checkpoint: to {reads} tokens back{route}",
                          severity="info", evidence=evidence)
        return
    if served and not served[0].reads:
        raise Skip(f"the server does not read the planted words even {served[0].distance} tokens back and no "
                   f"--model says whether its checkpoint does (EPT06x judge whether it reads at all): "
                   f"{measured(served[0])[:120]!r}{route}")
    if fails is not None:
        failed = next(r for r in served if r.distance == fails)
        yield Problem(f"the server reads planted words {reads} tokens back, not {fails}: {measured(failed)}{route}",
                      evidence=evidence)
    else:
        yield Problem(f"the server reads planted words {reads} tokens back{route}", severity="info",
                      evidence=evidence)


@check("EPT123", category="endpoint", severity="warning", needs=("endpoint",),
       hint="Start the server with a context as long as you need (llama.cpp -c, vLLM --max-model-len, Ollama "
            "num_ctx) and pass long prompts whole (no truncation, no context shift, no proxy cut).")
@asks_server
def enforced_limit(ctx: EndpointInputs):
    """The server takes prompts as long as asked, whole: no HTTP 400 below N, no silent cut.

    Each long prompt's usage.prompt_tokens (EPT122's prompts, either route) is compared with the reference's count
    (--model) or with the server's own count of the text sent (/tokenize, llama.cpp and vLLM): a count under 90 %
    of it means the prompt was cut on the way (a context shift, Ollama's num_ctx, a proxy that drops the middle),
    named with the distance its planted words stood at; on the echo route the server's echo of a prompt that
    does not spell the text sent says it first, with no count needed. A refusal names the real limit.
    """
    got = server_readings(ctx)
    served = got.readings
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
    cut = next((r for r in served if r.whole is False), None)
    if cut is not None:
        yield Problem(f"the prompt planting words {cut.distance} tokens back reached the model changed: the server's "
                      f"echo of it ({cut.prompt_tokens} tokens) does not spell the text sent, cut on the way "
                      f"(route: {got.route})", evidence={"distance": cut.distance, "prompt_tokens": cut.prompt_tokens,
                                                         "route": got.route, "server": rows(served)})
        return
    try:
        expected = {r.distance: r.prompt_tokens for r in reference_readings(ctx, got)}
        source = "the reference's count"
    except ResourceError:       # no --model: the server's own count of what was sent (/tokenize), when it has one
        expected = {d: len(ids) for d, ids in ((d, ctx.tokenize(got.prefix + text))
                                               for d, text in got.prompts.items()) if ids}
        source = "the server's /tokenize count of what was sent"
    if not expected:
        raise Skip("no count to compare usage.prompt_tokens with: no --model and no /tokenize route")
    for r in served:
        want = expected.get(r.distance)
        if r.error or r.prompt_tokens is None or not want:
            continue
        if r.prompt_tokens < CUT_FRACTION * want:
            yield Problem(f"a prompt of {want} tokens ({source}) planting words {r.distance} tokens back reached "
                          f"the model as {r.prompt_tokens}: cut on the way (route: {got.route})",
                          evidence={"expected_tokens": want, "prompt_tokens": r.prompt_tokens, "route": got.route,
                                    "distance": r.distance, "server": rows(served)})
            return
