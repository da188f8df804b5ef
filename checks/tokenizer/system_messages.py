"""TOK035: every message of a conversation reaches the rendered prompt (a second or mid-conversation system
message the template drops without an error: vllm#44330, the gpt-oss template)."""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check
from checks.shared.chat.conversations import SYSTEM_SHAPES, describe, missing_messages
from checks.tokenizer.chat_template import template_location


def render_shapes(tok) -> dict[str, str | Exception]:
    """shape -> the rendered prompt (with the generation prompt), or the error the template raised."""
    out = {}
    for shape, messages in SYSTEM_SHAPES.items():
        try:
            out[shape] = tok.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        except Exception as e:      # a template that refuses a shape says so: no silent drop
            out[shape] = e
    return out


@check("TOK035", category="tokenizer", severity="error", needs=("tokenizer",),
       hint="render every system message (the model's template keeps only the first: merge later instructions "
            "into it, or fix the template to write them), or make the template raise on a shape it cannot render")
def system_messages_reach_prompt(ctx):
    """A system message (first, second, mid-conversation) that the chat template drops without an error.

    Renders conversations of four shapes (a system message first; two system messages; a second one after an
    answer; one after the first turn only), every message distinct, and names each message whose text the
    prompt does not hold. Clients put instructions in later system messages (an agent's step, a tool policy);
    a template that keeps only the first (the gpt-oss template: vllm#44330) loses them while the server answers
    200. A conversation's only system message or a user turn dropped is an error; one of two system messages a
    warning (DeepSeek-R1's template keeps the last, gpt-oss's the first). A template that raises on a shape
    refuses it openly (info)."""
    tok = ctx.tokenizer
    if not tok.chat_template:
        raise Skip("no chat template (base model)")
    refused, kept = [], []
    for shape, rendered in render_shapes(tok).items():
        messages = SYSTEM_SHAPES[shape]
        if isinstance(rendered, Exception):
            refused.append(f"{shape}: {type(rendered).__name__}: {str(rendered)[:120]}")
            continue
        missing = missing_messages(rendered, messages)
        kept.append(shape) if not missing else None
        for i in missing:
            alone = messages[i]["role"] == "user" or len(messages) == 2     # no other system message kept
            yield Problem(f"the template drops {describe(messages, i)} of the {shape!r} conversation: it never "
                          f"reaches the prompt, and rendering raises no error", severity="error" if alone else
                          "warning", location=template_location(ctx),
                          evidence={"shape": shape, "messages": messages, "rendered": rendered[-1500:]})
    if refused:
        yield Problem(f"the template refuses {len(refused)} conversation shape(s) openly: {'; '.join(refused)}",
                      severity="info")
    if kept:
        yield Problem(f"every message reaches the prompt in {kept}", severity="info")
