"""EPT084: one greedy answer, however the server gets to it: streamed or not, cold or from its prefix cache, after
a long shared prefix with another suffix. Where two answers differ, the reference engine (fed each server answer,
teacher forcing) says how far apart the two tokens at the first divergence are: a near tie flipped by other
batch shapes is a warning, anything else an error."""
from __future__ import annotations

from checks.endpoint.chain import answers, scenarios
from checks.endpoint.context import EndpointContext, asks_server
from checks.endpoint.teacher import teacher_force
from checks.registry import Problem, check

NEAR_TIE_NATS = 0.5          # two tokens this close in the reference: either is a fair greedy pick
PREFIX_TOKENS = 1024         # the long shared prefix (less on a small window)


def _request(messages: list[dict], ctx: EndpointContext, cache: bool) -> dict:
    request = {"messages": messages, "max_tokens": scenarios.PARITY_TOKENS, "logprobs": True, "top_logprobs": 1}
    if cache and ctx.surface.kind == "llama.cpp":
        request["cache_prompt"] = True        # its greedy requests switch the cache off; these want it on
    return request


def _ask(ctx, key, messages, *, stream=False, cache=False):
    return answers.ask_chat(ctx, f"parity:{key}", _request(messages, ctx, cache), stream=stream)


def prefix_messages(ctx: EndpointContext) -> tuple[list[dict], list[dict]]:
    window = getattr(ctx.ask("context", lambda: ctx.surface.context()), "max_context", None)
    target = min(PREFIX_TOKENS, (window or 4 * PREFIX_TOKENS) // 2, ctx.reference.max_context // 2)
    per = len(ctx.reference.tokenizer.encode(scenarios.shared_prefix(8), add_special_tokens=False)) / 8
    prefix = scenarios.shared_prefix(max(int(target / per), 4))
    return scenarios.prefixed(prefix, scenarios.SUFFIXES[0]), scenarios.prefixed(prefix, scenarios.SUFFIXES[1])


def pairs(ctx: EndpointContext) -> list[tuple[str, list[dict], object, object]]:
    """(what, messages, first answer, second answer) for each comparison, in the order the requests are sent."""
    base = _ask(ctx, "base", scenarios.PARITY)
    streamed = _ask(ctx, "stream", scenarios.PARITY, stream=True)
    _ask(ctx, "warm", scenarios.PARITY, cache=True)
    hit = _ask(ctx, "hit", scenarios.PARITY, cache=True)
    first, second = prefix_messages(ctx)
    cold = _ask(ctx, "prefix:cold", second)
    _ask(ctx, "prefix:other", first, cache=True)
    shared = _ask(ctx, "prefix:hit", second, cache=True)
    return [("non-streamed vs streamed", scenarios.PARITY, base, streamed),
            ("cold vs prefix-cache hit", scenarios.PARITY, base, hit),
            ("cold vs after a long shared prefix with another suffix", second, cold, shared)]


def pieces(answer) -> list[str]:
    return [t.token for t in answer.tokens] if answer.tokens else []


def divergence(ctx: EndpointContext, messages, a, b) -> dict:
    """Where two answers part and, when the reference can replay both, how far apart the two tokens are there."""
    pa, pb = pieces(a), pieces(b)
    at = next((i for i, (x, y) in enumerate(zip(pa, pb)) if x != y), min(len(pa), len(pb)))
    out = {"token": at, "first": "".join(pa[at:at + 4]) or a.content[:40], "second": "".join(pb[at:at + 4])
           or b.content[:40], "reference_gap_nats": None}
    ref = ctx.reference
    prompt = ref.chat_ids(messages)
    if not (pa and pb) or a.prompt_tokens not in (None, len(prompt)) or at >= min(len(pa), len(pb)):
        return out
    engine = ctx.engine()
    fa, fb = (teacher_force(ref, engine, prompt, x.tokens) for x in (a, b))
    if at < len(fa.steps) and at < len(fb.steps):
        out["reference_gap_nats"] = round(abs(fa.steps[at].gap - fb.steps[at].gap), 4)
        out["reference_pick"] = ref.piece(fa.steps[at].reference_id)
    return out


@check("EPT084", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="a greedy answer must not depend on streaming or caching: check the server's prefix cache, chunked "
            "prefill and sliding-window settings (disable them to confirm) and update the server")
@asks_server
def greedy_parity(ctx: EndpointContext):
    """A greedy answer differs between streaming and not, cold and cache-hit, or after a shared prefix.

    The same temperature-0 chat request is sent non-streamed, streamed, twice with the prefix cache on (the
    second a hit), and a question after a long shared prefix is asked cold, then after the same prefix with
    another question (the prefix comes from the cache; chunked prefill and sliding windows act here). Each pair
    must give the same text. Where one differs, both answers are replayed through the reference engine: when
    the two tokens at the first divergence are within 0.5 nats for the reference it is a near tie flipped by
    other batch shapes (info), otherwise the cache or stream path computes something else (error); answers the
    reference cannot replay (no logprobs, another prompt) are a warning."""
    found = False
    compared = []
    for what, messages, a, b in pairs(ctx):
        compared.append({"pair": what, "first": a.content[:200], "second": b.content[:200]})
        if a.content == b.content:
            continue
        found = True
        where = divergence(ctx, messages, a, b)
        evidence = {"pair": what, "first": a.summary(), "second": b.summary(), "divergence": where}
        gap = where["reference_gap_nats"]
        text = f"{what}: greedy answers part at token {where['token']} ({where['first']!r} vs {where['second']!r})"
        if gap is not None and gap < NEAR_TIE_NATS:
            yield Problem(f"{text}; the reference puts the two within {gap} nats: a near tie flipped by other "
                          f"batch shapes", severity="info", evidence=evidence)
        elif gap is not None:
            yield Problem(f"{text}; the reference puts them {gap} nats apart: not a near tie", evidence=evidence)
        else:
            yield Problem(f"{text}; the reference cannot replay them", severity="warning", evidence=evidence)
    if not found:
        yield Problem(f"greedy answers identical across {len(compared)} pairs (stream, cache hit, shared prefix)",
                      severity="info", evidence={"pairs": compared})
