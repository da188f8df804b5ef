"""EPT076: a call to a tool that takes no arguments reaches the client, streamed and not, with arguments "{}"."""
from __future__ import annotations

from checks.endpoint.chain import answers, calls, scenarios
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check
from reference_engine.generate import tool_calls as formats

NAME = scenarios.NO_ARGS_TOOL["function"]["name"]


def _lost(answer, template) -> str | None:
    """Why an answer without a structured call lost one (None: the model answered in prose)."""
    parsed = calls.raw_calls(answer.content, template)
    if parsed is not None:
        return f"the model wrote the call ({parsed.format} format) but it stayed in content as text"
    if not answer.content.strip() and (answer.completion_tokens or 0) > 2:
        return (f"the answer is empty though the model generated {answer.completion_tokens} tokens (finish "
                f"{answer.finish_reason!r}): the parser discarded a call it could not fill with arguments")
    return None


def _argument_problems(answer) -> list[str]:
    out = []
    for call in answer.tool_calls:
        value, error = formats.decode_arguments(call.arguments)
        if error or value != {}:
            out.append(f"{call.name}: arguments {call.arguments!r} for a tool without parameters (expected \"{{}}\")")
        elif isinstance(call.arguments, str) and not call.arguments.strip():
            out.append(f"{call.name}: arguments sent as an empty string, not \"{{}}\": clients that parse them as "
                       f"JSON fail")
    return out


@check("EPT076", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="update the server's tool-call parser: a call without arguments (or with them omitted) is a call; "
            "send its arguments as \"{}\"")
@asks_server
def zero_argument_call(ctx: EndpointInputs):
    """A call to a tool without parameters is lost, or its arguments are not "{}".

    Shows one earlier call of `get_server_time()` (no parameters), then asks again, non-streamed and streamed
    (tool_choice auto). A parser that treats a call without arguments as no call drops it (ollama#17328: the
    call silently discarded) or leaves it as text in content; its arguments must be the JSON object "{}" (an
    empty string breaks clients that parse it). Where the model answers in prose in both, nothing is judged."""
    template = ctx.reference.tokenizer.chat_template
    plain = answers.ask_chat(ctx, "tools:zero-args", scenarios.NO_ARGS_REQUEST, feature="requests with `tools`")
    streamed = answers.ask_chat(ctx, "tools:zero-args:stream", scenarios.NO_ARGS_REQUEST, stream=True,
                                feature="requests with `tools`")
    evidence = {"request": scenarios.NO_ARGS_REQUEST, "non_streamed": plain.summary(), "streamed": streamed.summary()}
    called = [a for a in (plain, streamed) if a.tool_calls]
    for answer, how in ((plain, "non-streamed"), (streamed, "streamed")):
        if answer.tool_calls:
            for line in _argument_problems(answer):
                yield Problem(f"{how}: {line}", severity="warning" if "empty string" in line else "error",
                              evidence=evidence)
            continue
        why = _lost(answer, template)
        if why or called:
            yield Problem(f"{how}: the call of {NAME}() (no arguments) is lost: "
                          f"{why or 'the other answer of the same greedy request carries it'}", evidence=evidence)
    if not called and not any(_lost(a, template) for a in (plain, streamed)):
        raise Skip(f"the model answered in prose, not with a call of {NAME}(): nothing to judge")
    if len(called) == 2 and not any(_argument_problems(a) for a in called):
        yield Problem(f"the call of {NAME}() arrives streamed and not, arguments \"{{}}\"", severity="info",
                      evidence=evidence)
