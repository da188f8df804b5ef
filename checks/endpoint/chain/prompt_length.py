"""EPT083: the prompt the server reports it read (usage.prompt_tokens) vs the reference's count of the same prompt:
a prompt cut to a context limit with 200 OK (ollama#17889, #17427)."""
from __future__ import annotations

from checks.endpoint.chain import answers, scenarios
from checks.endpoint.context import EndpointContext, asks_server
from checks.registry import Problem, Skip, check
from probes.endpoint import EndpointError

LONG_TOKENS = 4096          # the long prompt, unless the model's window is shorter
MARGIN = 96                 # room for the template and the answer
CUT_RATIO = 0.95            # fewer prompt tokens than this share of the reference's: cut


def long_prompt(ctx: EndpointContext, target: int) -> list[dict]:
    """A user turn of about `target` reference tokens: numbered notes and a question about the first one."""
    tok = ctx.reference.tokenizer
    per = len(tok.encode(scenarios.shared_prefix(8), add_special_tokens=False)) / 8
    notes = scenarios.shared_prefix(max(int(target / per), 8))
    return [{"role": "user", "content": notes + "\n\nWhat year was the lighthouse in note (1) built?"}]


def target_tokens(ctx: EndpointContext) -> int:
    return max(min(ctx.reference.max_context, LONG_TOKENS) - MARGIN, 256)


@check("EPT083", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="raise the server's context (Ollama num_ctx, llama.cpp -c) or make it refuse prompts it cannot hold")
@asks_server
def prompt_cut(ctx: EndpointContext):
    """usage.prompt_tokens of a long prompt is smaller than the reference's count: the prompt was cut silently.

    Sends a chat prompt of up to 4k tokens (less for models with a shorter window) and compares the server's
    usage.prompt_tokens with the reference template and tokenizer's count of the same conversation. A server
    that cannot hold it must refuse it (an HTTP error naming the limit: reported for information); one that
    answers 200 OK having read fewer tokens dropped part of the prompt without saying so (Ollama num_ctx,
    ollama#17889, #17427). Small differences either way are template or BOS drift (EPT011, EPT012)."""
    messages = long_prompt(ctx, target_tokens(ctx))
    text = answers.reference_render(ctx, messages)
    if text is None:
        raise Skip("the reference template cannot render a plain user turn")
    expected = answers.count(ctx, text)
    request = {"messages": messages, "max_tokens": 1}
    evidence = {"reference_prompt_tokens": expected, "request": {"messages": "(a user turn of numbered notes)",
                                                                 "max_tokens": 1}}
    try:
        answer = answers.ask_chat(ctx, "long", request)
    except EndpointError as e:
        if not answers.refused(e):
            raise
        yield Problem(f"the server refuses a {expected}-token prompt: {e}", severity="info",
                      evidence={**evidence, "error": str(e)})
        return
    evidence["answer"] = answer.summary()
    if answer.prompt_tokens is None:
        raise Skip("the server reports no usage.prompt_tokens")
    if answer.prompt_tokens < CUT_RATIO * expected:
        yield Problem(f"the prompt was cut silently: the server read {answer.prompt_tokens} of the {expected} "
                      f"tokens and answered 200 OK ({answer.finish_reason!r})", evidence=evidence)
        return
    yield Problem(f"the server read the whole long prompt: {answer.prompt_tokens} tokens, reference {expected}",
                  severity="info", evidence=evidence)
