"""EPT084: one greedy answer, however the server gets to it: streamed or not, with its prompt cache off or on, a
cache hit on a prompt it has seen, after a long shared prefix with another suffix. Whole answers, each run to its
stop (at most scenarios.PARITY_TOKENS), are compared request by request; where two differ, the finding names the
first differing token, and the server's own logprobs there say whether the two picks were a near tie (a quantized
model's own near tie, flipped by another batch shape, is no fault)."""
from __future__ import annotations

from checks.endpoint.chain import answers, scenarios
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, check

NEAR_TIE_NATS = 0.5          # two tokens this close in the served model: either is a fair greedy pick
TOP_LOGPROBS = 5             # alternatives asked per position (the other answer's token should be among them)
PREFIX_TOKENS = 1024         # the long shared prefix (less on a small window)


def _request(messages: list[dict], ctx: EndpointInputs, cache: bool) -> dict:
    request = {"messages": messages, "max_tokens": scenarios.PARITY_TOKENS, "logprobs": True,
               "top_logprobs": TOP_LOGPROBS}
    if ctx.surface.kind == "llama.cpp":
        request["cache_prompt"] = cache       # llama-server's own switch, set both ways
    return request


def _ask(ctx, key, messages, *, stream=False, cache=False):
    return answers.ask_chat(ctx, f"parity:{key}", _request(messages, ctx, cache), stream=stream)


def prefix_messages(ctx: EndpointInputs) -> tuple[list[dict], list[dict]]:
    window = getattr(ctx.ask("context", lambda: ctx.surface.context()), "max_context", None)
    target = min(PREFIX_TOKENS, (window or 4 * PREFIX_TOKENS) // 2, ctx.reference.max_context // 2)
    per = len(ctx.reference.tokenizer.encode(scenarios.shared_prefix(8), add_special_tokens=False)) / 8
    prefix = scenarios.shared_prefix(max(int(target / per), 4))
    return scenarios.prefixed(prefix, scenarios.SUFFIXES[0]), scenarios.prefixed(prefix, scenarios.SUFFIXES[1])


def comparisons(ctx: EndpointInputs):
    """(what, first answer, second answer) as soon as the second answer of each pair has come: streamed and not,
    with the cache off and on. llama.cpp switches its prompt cache per request (`cache_prompt`); a server whose
    cache is set per server (vLLM's prefix caching, llama-cpp-python's --cache) is compared cold vs repeated."""
    base = _ask(ctx, "base", scenarios.PARITY)
    if ctx.surface.kind == "llama.cpp":
        yield "non-streamed vs streamed (cache_prompt false)", base, _ask(ctx, "stream", scenarios.PARITY,
                                                                          stream=True)
        warm = _ask(ctx, "warm", scenarios.PARITY, cache=True)
        yield "prompt cache off vs on (cache_prompt false vs true)", base, warm
        yield "prompt cache on, the same request twice (the second a hit)", warm, _ask(ctx, "warm:again",
                                                                                        scenarios.PARITY, cache=True)
        yield "non-streamed vs streamed on a cache hit (cache_prompt true)", warm, _ask(
            ctx, "hit", scenarios.PARITY, stream=True, cache=True)
    else:
        warm = _ask(ctx, "warm", scenarios.PARITY, cache=True)
        yield "a cold answer vs the same request repeated (the server's own cache)", base, warm
        yield "non-streamed vs streamed (repeated)", warm, _ask(ctx, "stream", scenarios.PARITY, stream=True)
    first, second = prefix_messages(ctx)
    cold = _ask(ctx, "prefix:cold", second)
    _ask(ctx, "prefix:other", first, cache=True)
    yield "cold vs after a long shared prefix with another suffix", cold, _ask(ctx, "prefix:hit", second,
                                                                               cache=True)


def logprob_shift(a, b) -> float | None:
    """The largest difference between two answers' logprobs of the same token (None: no logprobs to compare)."""
    if not a.tokens or not b.tokens:
        return None
    shifts = [abs(x.logprob - y.logprob) for x, y in zip(a.tokens, b.tokens)
              if x.token == y.token and x.logprob is not None and y.logprob is not None]
    return max(shifts) if shifts else None


def pieces(answer) -> list[str]:
    return [t.token for t in answer.tokens] if answer.tokens else []


def spelled(answer) -> bool | None:
    """Whether the answer's logprob tokens spell its content (None: no tokens, or pieces of split characters)."""
    text = "".join(pieces(answer))
    if not answer.tokens or "\ufffd" in text:
        return None
    return text == answer.content


def served_gap(a, b) -> dict:
    """At the first token where two answers part, how far apart the served model put the two picks, from its own
    top_logprobs: `gap_nats` (exact, the other pick among the alternatives) or `gap_at_least` (it is not among
    the top alternatives), or `why` the server's logprobs cannot say."""
    if spelled(a) is None or spelled(b) is None:
        return {"why": "the server sent no per-token logprobs for both answers"}
    if not (spelled(a) and spelled(b)):
        return {"why": "the server's own logprob tokens spell another text than its content", "contradiction": True}
    pa, pb = pieces(a), pieces(b)
    at = next((i for i, (x, y) in enumerate(zip(pa, pb)) if x != y), None)
    if at is None:
        return {"why": "one answer is a prefix of the other (it stopped early)", "contradiction": True}
    out = {"token": at, "first": pa[at], "second": pb[at]}
    gaps, bounds = [], []
    for mine, other in ((a.tokens[at], pb[at]), (b.tokens[at], pa[at])):
        chosen = mine.top.get(mine.token, mine.logprob)
        if chosen is None or not mine.top:
            continue
        if other in mine.top:
            gaps.append(chosen - mine.top[other])
        elif len(mine.top) >= 2:
            bounds.append(chosen - min(mine.top.values()))
    if gaps:
        return {**out, "gap_nats": round(min(abs(g) for g in gaps), 4)}
    if bounds:
        return {**out, "gap_at_least": round(max(bounds), 4)}
    return {**out, "why": "the server sent no top_logprobs at the diverging token"}


def parting(a, b, tokenizer) -> dict:
    """Where two answers part, in tokens (`position` counts from 1): by the server's own logprob pieces where both
    spell their content, else by the reference tokenizer's tokens of the two contents."""
    if spelled(a) and spelled(b):
        pa, pb, source = pieces(a), pieces(b), "the server's logprob tokens"
    else:
        def split(text):
            return [tokenizer.decode([i]) for i in tokenizer.encode(text, add_special_tokens=False)]
        pa, pb, source = split(a.content), split(b.content), "the reference tokenizer's tokens of each content"
    at = next((i for i, (x, y) in enumerate(zip(pa, pb)) if x != y), min(len(pa), len(pb)))
    return {"position": at + 1, "lengths": [len(pa), len(pb)], "counted_by": source}


def verdict(what: str, a, b, tokenizer) -> Problem:
    where, token = served_gap(a, b), parting(a, b, tokenizer)
    at = next((i for i, (x, y) in enumerate(zip(a.content, b.content)) if x != y), min(len(a.content),
                                                                                     len(b.content)))
    text = (f"{what}: greedy answers of {token['lengths'][0]} and {token['lengths'][1]} tokens part at token "
            f"{token['position']} (character {at}: {a.content[at:at + 24]!r} vs {b.content[at:at + 24]!r})")
    evidence = {"pair": what, "first": a.summary(), "second": b.summary(), "divergence": where,
                "first_differing_token": token}
    if "gap_nats" in where and where["gap_nats"] < NEAR_TIE_NATS:
        return Problem(f"{text}; the served model puts the two picks {where['gap_nats']} nats apart: its own near "
                       f"tie, flipped by another batch shape", severity="info", evidence=evidence)
    if "gap_nats" in where or "gap_at_least" in where:
        gap = where.get("gap_nats", where.get("gap_at_least"))
        return Problem(f"{text}; the served model puts the picks {gap}{'' if 'gap_nats' in where else '+'} nats "
                       f"apart: not a near tie", evidence=evidence)
    if where.get("contradiction"):
        return Problem(f"{text}; {where['why']}: the answer was changed after decoding", evidence=evidence)
    return Problem(f"{text}; {where['why']}, so no near tie can be shown", severity="warning", evidence=evidence)


@check("EPT084", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="a greedy answer must not depend on streaming or caching: check the server's prefix cache, chunked "
            "prefill and sliding-window settings (disable them to confirm) and update the server")
@asks_server
def greedy_parity(ctx: EndpointInputs):
    """A greedy answer differs between streaming and not, cache off and on, a cache hit, or after a shared prefix.

    The same temperature-0 chat request, answered to its stop (at most 128 tokens), is sent non-streamed and
    streamed with llama.cpp's per-request prompt cache off (`cache_prompt` false), then with it on twice
    non-streamed (the second a hit) and once streamed (a hit too); a server whose cache is set per server (vLLM,
    llama-cpp-python) is compared cold against the same request repeated, non-streamed and streamed. A question
    after a long shared prefix is asked cold, then after the same prefix with another question (the prefix comes
    from the cache; chunked prefill and sliding windows act here). Each pair must give the same whole answer,
    compared as each second answer arrives; a difference names the first differing token (by the server's
    logprob tokens, else the reference tokenizer's). The server's own top_logprobs at that token judge it: the
    two picks within 0.5 nats for the served model are its own near tie (info); further apart, or the other pick
    not among its top alternatives, the stream or cache path computes something else (error); logprob tokens
    that spell another text than the content mean the answer was rewritten after decoding (error); no logprobs
    to judge by is a warning. Pairs with the same tokens whose logprobs moved (a warm cache computing other
    numbers than a cold one: llama.cpp #28368) are listed in one info line with the largest shift per pair."""
    compared, differed, moved = [], False, []
    for what, a, b in comparisons(ctx):
        shift = logprob_shift(a, b)
        compared.append({"pair": what, "first": a.content[:200], "second": b.content[:200],
                         "finish_reasons": [a.finish_reason, b.finish_reason],
                         "completion_tokens": [a.completion_tokens, b.completion_tokens], "logprob_shift": shift})
        if a.content != b.content:
            differed = True
            yield verdict(what, a, b, ctx.reference.tokenizer)
        elif shift:
            moved.append(f"{what}: {shift:.4g}")
    if moved:
        yield Problem(f"the same greedy tokens, but their logprobs move by up to (nats) {'; '.join(moved)}: the "
                      f"cache or stream path computes other numbers, so scores differ and a near tie could flip",
                      severity="info", evidence={"pairs": compared})
    if not differed:
        yield Problem(f"greedy answers identical across {len(compared)} pairs, each to its stop (streamed and not, "
                      f"cache off and on, shared prefix)", severity="info", evidence={"pairs": compared})
