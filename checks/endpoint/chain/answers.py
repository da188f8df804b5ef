"""The chain requests several checks read, each asked once per run (EndpointInputs.ask), and what a refusal means.

A 4xx answer to a request with a feature (tools, tool_choice, response_format) is the server saying it lacks that
feature: the check skips naming it (`refused`), never a finding against the model. A 5xx or a transport error stays
an EndpointError (asks_server makes it a warning with the HTTP error).
"""
from __future__ import annotations

import json

from checks.endpoint.chain import scenarios
from checks.endpoint.inputs import EndpointInputs
from checks.catalogue.registry import Skip
from probes.endpoint import EndpointError
from probes.endpoint.chain import ChainAnswer, chat, served_prompt

REFUSALS = (400, 404, 405, 415, 422, 501)


def refused(e: EndpointError) -> bool:
    """A 4xx, or a 500 that is a request validation error (llama-cpp-python answers an unknown response_format
    type with HTTP 500 and pydantic's "validation error")."""
    return e.status in REFUSALS or (e.status == 500 and "validation error" in str(e))


def ask_chat(ctx: EndpointInputs, key: str, request: dict, *, stream: bool = False,
             feature: str = "") -> ChainAnswer:
    """The answer to `request` (asked once); Skip naming `feature` when the server refuses it."""
    try:
        return ctx.ask(f"chain:{key}", lambda: chat(ctx.surface, request, stream=stream))
    except EndpointError as e:
        if feature and refused(e):
            raise Skip(f"the {ctx.surface.label} refuses {feature}: {str(e)[:200]}") from None
        raise


def tool_answer(ctx: EndpointInputs, stream: bool = False, choice: str | None = None) -> ChainAnswer:
    """tool_choice left to the server's default ("auto") or `choice`, on the one-shot conversation."""
    return ask_chat(ctx, f"tools:{choice or 'auto'}:{stream}", scenarios.tool_request(choice), stream=stream,
                    feature="requests with `tools`" if choice is None else f'tool_choice "{choice}"')


def required_answer(ctx: EndpointInputs) -> ChainAnswer:
    return tool_answer(ctx, choice="required")


def named_answer(ctx: EndpointInputs) -> ChainAnswer:
    return ask_chat(ctx, "tools:named", scenarios.tool_request(scenarios.NAMED_CHOICE),
                    feature="a named tool_choice")


def tools_prompt(ctx: EndpointInputs) -> str | None:
    """The prompt the server builds for the tool request, where it can say (llama.cpp, vLLM)."""
    try:
        return ctx.ask("chain:tools:prompt", lambda: served_prompt(ctx.surface, scenarios.tool_request()))
    except EndpointError as e:
        if refused(e):
            return None
        raise


def reference_render(ctx: EndpointInputs, messages: list[dict], tools: list | None = None) -> str | None:
    """The reference template's prompt (None: the template refuses this conversation). Cached by the
    conversation's content (an id() of a list can be reused by another list once the first is gone)."""
    key = "render:" + json.dumps([messages, tools], sort_keys=True, default=str)
    if key not in ctx.state:
        try:
            extra = {"tools": tools} if tools else {}
            ctx.state[key] = ctx.reference.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                                         **extra)
        except Exception:  # a template that cannot render this shape (ChatTemplateError and the like)
            ctx.state[key] = None
    return ctx.state[key]


REFERENCE_ONE_SHOT = scenarios.one_shot(arguments_as_text=False)


def reference_tool_prompts(ctx: EndpointInputs) -> tuple[str | None, str | None]:
    """The reference's one-shot prompt with and without the tool definitions."""
    return (reference_render(ctx, REFERENCE_ONE_SHOT, scenarios.TOOLS),
            reference_render(ctx, REFERENCE_ONE_SHOT))


def count(ctx: EndpointInputs, text: str | None) -> int | None:
    """The prompt's length as a server counts it (usage.prompt_tokens): the rendered text's tokens plus the BOS
    the tokenizer adds in front where the template did not write one."""
    if text is None:
        return None
    tok = ctx.reference.tokenizer
    plain = tok.encode(text, add_special_tokens=False)
    bos = tok.bos_token_id
    added = bos is not None and tok.encode(text, add_special_tokens=True)[:1] == [bos] and plain[:1] != [bos]
    return len(plain) + int(added)
