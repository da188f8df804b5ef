"""EPT044: batch invariance at temperature 0. The same chat request is answered alone, then again while other
requests run beside it (continuous batching: llama-server `-np N`, vLLM), and the two greedy answers are compared
token by token; where they part, the server's own logprobs say whether the two picks were a near tie (the batch's
other arithmetic flipping it) or a real difference (another request's state leaking in)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from checks.endpoint.chain import answers, parity
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, check
from probes.endpoint.chain import chat

CROWD = 4                   # requests in flight together: the asked one and three others
TOKENS = 48
QUESTION = [{"role": "user", "content": "Write a short story about a lighthouse keeper and a storm."}]
OTHERS = ("Explain how rain forms.", "List five fruits and their colours.",
          "What is the tallest mountain in Europe and why?")


def _request(messages: list[dict]) -> dict:
    return {"messages": messages, "max_tokens": TOKENS, "logprobs": True, "top_logprobs": parity.TOP_LOGPROBS}


def crowded(ctx: EndpointInputs):
    """The answer to QUESTION sent together with CROWD - 1 other requests (each its own connection), sent last so
    that it arrives among them."""
    def ask():
        requests = [_request([{"role": "user", "content": q}]) for q in OTHERS[:CROWD - 1]] + [_request(QUESTION)]
        with ThreadPoolExecutor(len(requests)) as pool:
            futures = [pool.submit(chat, ctx.surface, r) for r in requests]
            return [f.result() for f in futures][-1]
    return ctx.ask("serving:crowded", ask)


@check("EPT044", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="a greedy answer must not depend on the requests batched beside it: a real difference is state "
            "leaking between requests (update the server; serve with one slot to confirm); a near tie flipped is "
            "batch-shape arithmetic (vLLM: VLLM_BATCH_INVARIANT=1 for bit-exact answers)")
@asks_server
def batch_invariance(ctx: EndpointInputs):
    """A greedy answer changes when other requests share the batch.

    The same temperature-0 chat request (48 tokens, top-5 logprobs) is sent alone, then at the same moment as
    three other requests. The same tokens with the same logprobs: batch invariant (info). The same tokens with
    logprobs moved: the batch changes the arithmetic, a near tie could flip (info, with the largest shift).
    Different tokens: the first differing token is named with the server's own margin there: within 0.5
    nats a near tie flipped by the batch shape (info), further apart, or the other pick not among its top
    alternatives, the request's answer depends on its neighbours (error)."""
    alone = answers.ask_chat(ctx, "serving:alone", _request(QUESTION))
    crowd = crowded(ctx)
    slots = ctx.surface.info.get("total_slots")
    what = f"alone vs among {CROWD} concurrent requests"
    if alone.content != crowd.content:
        yield parity.verdict(what, alone, crowd, ctx.reference.tokenizer)
        return
    shift = parity.logprob_shift(alone, crowd)
    evidence = {"pair": what, "answer": alone.content[:200], "completion_tokens": alone.completion_tokens,
                "max_logprob_shift": shift, "server_slots": slots}
    one_slot = f" (the server runs {slots} slot: no batch formed)" if slots == 1 else ""
    if shift:
        yield Problem(f"{what}: the same {len(alone.tokens)} greedy tokens, but their logprobs move by up to "
                      f"{shift:.4g} nats with the batch: not batch invariant, a near tie could flip",
                      severity="info", evidence=evidence)
    else:
        yield Problem(f"{what}: the same greedy answer{' with the same logprobs' if shift == 0 else ''}{one_slot}",
                      severity="info", evidence=evidence)
