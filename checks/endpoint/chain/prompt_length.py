"""EPT083: the prompt the server reports it read (usage.prompt_tokens) vs the reference's count of the same prompt,
for conversations of several shapes and lengths: a message cut with 200 OK (ollama#17889, #17427: a prompt cut to
the context limit; a gateway trimming long messages or thinning the history), named by role with the tokens it
lost."""
from __future__ import annotations

from checks.endpoint.chain import answers, scenarios
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check
from probes.endpoint import EndpointError

LONG_TOKENS = 4096          # the longest user turn, unless the model's window is shorter
MEDIUM_TOKENS = 1024        # a long system prompt or tool result
SHORT_TOKENS = 160          # a message a gateway's "long message" rule already bites on
MARGIN = 96                 # room for the template and the answer
SLACK = (2, 0.005)          # fewer tokens than the reference's by more than max(2, 0.5 %): a cut. SmolLM2 on
                            # llama-server and llama-cpp-python reads 0 tokens fewer on all 15 probes (8 and 7):
                            # the 2 admit a BOS either way, the 0.5 % a tokenizer merging digits or spaces
                            # otherwise (5 tokens of a 1k message, 21 of 4k; the old 3 % let 120 go)
QUESTION = "What year was the lighthouse in note (1) built?"


def notes(ctx: EndpointInputs, target: int) -> str:
    """Numbered notes of about `target` reference tokens (every part distinct: a cut anywhere shows)."""
    per = len(ctx.reference.tokenizer.encode(scenarios.shared_prefix(8), add_special_tokens=False)) / 8
    return scenarios.shared_prefix(max(int(target / per), 4))


def shaped(shape: str, text: str, as_text: bool = True) -> tuple[list[dict], list | None, int]:
    """(messages, tools, index of the long message) for one shape; the server gets call arguments as text, the
    reference as an object."""
    if shape == "user":
        return [{"role": "user", "content": text + "\n\n" + QUESTION}], None, 0
    if shape == "system":
        return [{"role": "system", "content": "Read the notes below.\n" + text},   # not EPT084's cached prefix
                {"role": "user", "content": QUESTION}], None, 0
    if shape == "mid-conversation":
        return [{"role": "user", "content": "I will send you my notes."},
                {"role": "assistant", "content": "Please send them."}, {"role": "user", "content": text},
                {"role": "assistant", "content": "I have read your notes."}, {"role": "user", "content": QUESTION}], \
            None, 2
    if shape == "assistant":
        return [{"role": "user", "content": "Recite the lighthouse notes."}, {"role": "assistant", "content": text},
                {"role": "user", "content": QUESTION}], None, 1
    call = scenarios.one_shot(as_text)[1]
    return [{"role": "user", "content": "What is the weather in Paris, and what do the notes say?"}, call,
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": text}], scenarios.TOOLS, 2


def window(ctx: EndpointInputs) -> int:
    served = getattr(ctx.ask("context", lambda: ctx.surface.context()), "max_context", None)
    return min(ctx.reference.max_context, served or ctx.reference.max_context)


def target_tokens(ctx: EndpointInputs) -> int:
    return max(min(window(ctx), LONG_TOKENS) - MARGIN, 256)


def plan(ctx: EndpointInputs) -> list[tuple[str, int]]:
    """(shape, target tokens) of each probe: every shape short and long, the user turn up to the window."""
    room = target_tokens(ctx)
    medium = min(MEDIUM_TOKENS, room)
    return [("user", SHORT_TOKENS), ("system", SHORT_TOKENS), ("tool result", SHORT_TOKENS), ("system", medium),
            ("tool result", medium), ("mid-conversation", medium), ("assistant", medium), ("user", room)]


def one_probe(ctx: EndpointInputs, shape: str, target: int):
    text = notes(ctx, target)
    messages, tools, index = shaped(shape, text)
    reference, _, _ = shaped(shape, text, as_text=False)
    rendered = answers.reference_render(ctx, reference, tools)
    if rendered is None:
        return {"shape": shape, "skipped": "the reference template cannot render it"}
    expected = answers.count(ctx, rendered)
    own = len(ctx.reference.tokenizer.encode(messages[index]["content"], add_special_tokens=False))
    request = {"messages": messages, "max_tokens": 1, **({"tools": tools} if tools else {})}
    row = {"shape": shape, "role": messages[index]["role"], "message_tokens": own, "reference_prompt_tokens": expected}
    if tools:       # a server that drops the tools reads this many (EPT073's fault, not a cut message)
        row["reference_without_tools"] = answers.count(ctx, answers.reference_render(ctx, reference))
    try:
        answer = answers.ask_chat(ctx, f"length:{shape}:{target}", request)
    except EndpointError as e:
        if not answers.refused(e):
            raise
        return {**row, "refused": str(e)[:300]}
    return {**row, "server_prompt_tokens": answer.prompt_tokens, "finish_reason": answer.finish_reason}


def lost(row: dict) -> int:
    """Tokens the server did not read, beyond template and BOS drift (0: none)."""
    got, expected = row.get("server_prompt_tokens"), row.get("reference_prompt_tokens")
    if got is None or expected is None:
        return 0
    missing = expected - got
    without = row.get("reference_without_tools")
    if without is not None and abs(got - without) <= slack(without):
        return 0
    return missing if missing > slack(expected) else 0


def slack(n: int) -> float:
    return max(SLACK[0], SLACK[1] * n)


@check("EPT083", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="raise the server's context (Ollama num_ctx, llama.cpp -c) or make it refuse prompts it cannot hold; "
            "remove a gateway's message trimming")
@asks_server
def prompt_cut(ctx: EndpointInputs):
    """A message of the prompt was cut silently: usage.prompt_tokens is below the reference's count.

    Sends conversations of five shapes, each with one long message: a system prompt (first), a user turn (the
    only one), a tool result (last, after a call, with the tools), a user turn in the middle of a five-message
    conversation, an assistant turn between two user turns. The first three go at about 160 tokens and long (1k
    tokens; the user turn up to 4k, or the model's window), the last two at 1k. The server's usage.prompt_tokens
    is compared with the reference template and tokenizer's count of the same conversation (BOS as the tokenizer
    adds it). The other messages are short, so the tokens missing are the long message's: the finding names its
    role and how many of its tokens the server did not read. Every part of the notes is distinct, so a cut at the
    start, middle or end shows alike. A server that cannot hold a prompt must refuse it (an HTTP error naming the
    limit: information); one that answers 200 OK having read fewer tokens dropped part of the prompt without
    saying so (Ollama num_ctx, ollama#17889, #17427; a gateway thinning the history). Differences within max(2,
    0.5 %) are BOS and tokenizer drift (EPT011, EPT013): SmolLM2's server never reads fewer tokens than its
    reference counts on llama-server or llama-cpp-python."""
    rows = []
    for shape, target in plan(ctx):
        row = one_probe(ctx, shape, target)
        rows.append(row)
        if lost(row):
            yield Problem(f"the {row['role']} message of {row['message_tokens']} tokens ({shape} probe) was cut "
                          f"silently: the server read {row['server_prompt_tokens']} prompt tokens, the reference "
                          f"counts {row['reference_prompt_tokens']}, so {lost(row)} tokens of that message are "
                          f"gone (HTTP 200, finish {row['finish_reason']!r})", evidence={"probe": row, "all": rows})
    if any(lost(r) for r in rows):
        return
    refused = [r for r in rows if "refused" in r]
    for r in refused:
        yield Problem(f"the server refuses a {r['reference_prompt_tokens']}-token prompt ({r['shape']} probe): "
                      f"{r['refused']}", severity="info", evidence=r)
    read = [(r["shape"], r["server_prompt_tokens"], r["reference_prompt_tokens"]) for r in rows
            if r.get("server_prompt_tokens") is not None]
    if read:
        yield Problem(f"the server read every probe prompt whole (shape, server, reference tokens): {read}",
                      severity="info", evidence={"probes": rows})
    elif not refused:
        answered = any("server_prompt_tokens" in r for r in rows)
        raise Skip("the server reports no usage.prompt_tokens" if answered else
                   "the reference template cannot render any probe conversation")
