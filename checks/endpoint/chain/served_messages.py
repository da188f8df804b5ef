"""EPT085: every message of a conversation reaches the prompt the server builds (a second or mid-conversation system
message dropped by the template the server renders: vllm#44330), read from the server's own rendering."""
from __future__ import annotations

from checks.endpoint.chain import answers
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check
from checks.shared.chat.conversations import SYSTEM_SHAPES, describe, missing_messages
from probes.endpoint import EndpointError
from probes.endpoint.chain import served_prompt


def _served(ctx: EndpointInputs, shape: str) -> str | None:
    try:
        request = {"messages": SYSTEM_SHAPES[shape]}
        return ctx.ask(f"chain:messages:{shape}", lambda: served_prompt(ctx.surface, request))
    except EndpointError as e:
        if answers.refused(e):
            return None
        raise


@check("EPT085", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="serve the model's own template (llama.cpp --jinja without another --chat-template-file, vLLM without "
            "--chat-template), or one that renders every system message; merge later instructions into the first")
@asks_server
def served_messages(ctx: EndpointInputs):
    """A message of the conversation never reaches the prompt the server builds (200 OK all the same).

    Asks the server what prompt it builds (llama.cpp POST /apply-template, vLLM /tokenize then /detokenize) for
    conversations of four shapes: a system message first, two system messages, a second one after an answer,
    one after the first turn only (checks/shared/chat/conversations.py; every message distinct). A message the
    server's prompt does not hold while the reference template renders it: the server renders another template
    that drops it (an error). One the model's own template drops too is the template's fault (TOK035 names it;
    a warning here: the server serves it faithfully). Where the server cannot say what prompt it builds, skips."""
    seen, found = [], False
    for shape, messages in SYSTEM_SHAPES.items():
        served = _served(ctx, shape)
        if served is None:
            raise Skip(f"the {ctx.surface.label} does not say what prompt it builds (llama.cpp /apply-template, "
                       f"vLLM /tokenize)")
        reference = answers.reference_render(ctx, messages)
        seen.append(shape)
        for i in missing_messages(served, messages):
            found = True
            by_reference = reference is not None and messages[i]["content"] in reference
            evidence = {"shape": shape, "messages": messages, "server_prompt": served[-1500:],
                        "reference_prompt": None if reference is None else reference[-1500:]}
            if by_reference:
                yield Problem(f"the server drops {describe(messages, i)} of the {shape!r} conversation: its prompt "
                              f"never holds it, the model's own template renders it (the server renders another "
                              f"template)", evidence=evidence)
            else:
                yield Problem(f"{describe(messages, i)} of the {shape!r} conversation never reaches the server's "
                              f"prompt: the model's own template drops it too (TOK035)", severity="warning",
                              evidence=evidence)
    if not found:
        yield Problem(f"every message reaches the server's prompt in {seen}", severity="info")
