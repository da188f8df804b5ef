"""EPT071-EPT074: tool calls through the serving chain (template -> model -> the server's tool parser -> the
OpenAI schema), probed on a one-shot conversation that shows one earlier call."""
from __future__ import annotations

from checks.endpoint.chain import answers, calls, scenarios
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check
from findings import Location
from probes.endpoint.chain import template_caps

TEMPLATE = Location(file="tokenizer_config.json", logical="chat_template")
STRICT = Location(logical="request.tools[].function.strict")       # the request's, not a file of the model
NOT_ENFORCED_HINT = ('mark the tool "strict": true in the request (vLLM, like OpenAI, makes the arguments fit a '
                     "tool's schema only for strict tools), or start vLLM with --tool-strict-level parameter "
                     "(every tool as if strict); else validate the arguments in the client")


def _evidence(answer, choice) -> dict:
    return {"request": {"messages": scenarios.one_shot(), "tools": [t["function"]["name"] for t in scenarios.TOOLS],
                        "tool_choice": choice or "(not set)"}, "answer": answer.summary()}


def _enforced(ctx: EndpointInputs, name: str) -> bool:
    """Must the server make `name`'s arguments fit its schema? When the request marked the tool strict, or when
    the server constrains every call (llama-server's grammar; any server not known to do otherwise)."""
    tool = next((t["function"] for t in scenarios.TOOLS if t["function"]["name"] == name), {})
    return bool(tool.get("strict")) or ctx.surface.enforces_tool_schemas


def _judge(ctx: EndpointInputs, answer, choice: str):
    evidence = _evidence(answer, None if choice == "auto" else "required")
    template = ctx.reference.tokenizer.chat_template
    left = calls.markup_left(answer.content, template)
    if left and answer.tool_calls:
        yield Problem(f"tool_choice {choice}: harmony channel markup left in content beside the parsed call "
                      f"({', '.join(left[:4])}): the server's harmony parser did not split the channels",
                      evidence={**evidence, "markup": left},
                      hint="serve gpt-oss with its harmony parser (vLLM --tool-call-parser openai, llama.cpp "
                           "--jinja with the model's template)")
    empty = calls.empty_calls_problem(answer)
    if empty:
        yield Problem(f"tool_choice {choice}: {empty}", evidence=evidence,
                      hint="update the server's tool-call parser (vllm#48020: calls lost while the finish reason "
                           "still says tool_calls)")
        return
    if not answer.tool_calls:
        parsed = calls.raw_calls(answer.content, template)
        if parsed is not None:
            what = (f"called {[c.name for c in parsed.calls]}" if parsed.calls else
                    f"wrote a call its parser cannot read ({'; '.join(parsed.errors)})")
            yield Problem(f"tool_choice {choice}: the model {what} ({parsed.format} format) but the server "
                          f"left the call as raw text in content; tool_calls is empty",
                          evidence={**evidence, "format": parsed.format, "parse_errors": parsed.errors},
                          hint="start the server with the tool-call parser of the model's family (vLLM "
                               "--tool-call-parser, llama.cpp --jinja with the model's own template)")
        elif left:
            yield Problem(f"tool_choice {choice}: harmony channel markup left in content ({', '.join(left[:4])}) "
                          f"and no tool call: the server's harmony parser did not split the channels",
                          evidence={**evidence, "markup": left})
        return
    for call in answer.tool_calls:
        loose = [] if _enforced(ctx, call.name) else calls.schema_problems(call)
        for line in calls.call_problems(call):
            if line in loose:
                yield Problem(f"tool_choice {choice}: {line}: the tool is not marked \"strict\" and the "
                              f"{ctx.surface.label} does not enforce the schema of a tool that is not",
                              severity="warning", evidence=evidence, hint=NOT_ENFORCED_HINT, location=STRICT)
            else:
                yield Problem(f"tool_choice {choice}: {line}", evidence=evidence)
    finish = calls.finish_problem(answer)
    if finish:
        yield Problem(f"tool_choice {choice}: {finish}", severity="warning", evidence=evidence)


@check("EPT071", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="serve the model with its own template and its family's tool-call parser; validate arguments "
            "against the tool schema (vLLM --tool-call-parser, llama.cpp --jinja)")
@asks_server
def tool_call_delivery(ctx: EndpointInputs):
    """Tool calls arrive as structured calls whose arguments validate against the tool's JSON schema.

    Sends two tools with strict schemas and a conversation that shows one earlier call (so even a small model
    calls), with tool_choice left to the server and with "required". A call the model wrote but the server left
    as raw text in `content` (tool_calls empty: the wrong or no tool parser), arguments that are not JSON, are
    double-encoded or break the schema, a call to an unknown tool, and finish_reason "stop" instead of
    "tool_calls" are the incidents of vllm#17161, vllm#22885, ollama#16686 and sglang#10995. The content is read
    back with the model family's own parser (reference_engine/generate/tool_calls.py). Arguments that are JSON but
    break the schema of a tool the request did not mark "strict" are a warning on a server that enforces schemas
    only for strict tools (vLLM), naming the switch; an error on the others (llama-server constrains every call)."""
    auto = answers.tool_answer(ctx)
    yield from _judge(ctx, auto, "auto")
    try:
        required = answers.required_answer(ctx)
    except Skip:
        return      # EPT074 names the refusal
    yield from _judge(ctx, required, '"required"')
    if auto.tool_calls or required.tool_calls:
        yield Problem(f"tool calls delivered: auto {[c.name for c in auto.tool_calls]}, required "
                      f"{[c.name for c in required.tool_calls]}", severity="info",
                      evidence={"auto": auto.summary(), "required": required.summary()}, hint="")


def _calls_view(answer) -> list:
    return [(c.name, calls.decoded(c)) for c in answer.tool_calls]


@check("EPT072", category="endpoint", severity="error", needs=("endpoint",),
       hint="the server's streaming tool-call path differs from its non-streaming one: update the server or "
            "its tool parser; clients that stream see other calls")
@asks_server
def streamed_tool_calls(ctx: EndpointInputs):
    """Streamed tool-call deltas assemble into the same call as the non-streamed answer.

    The same greedy tool request is sent with stream=false and stream=true; the stream's deltas are gathered by
    tool-call index (name from the first fragment, argument fragments concatenated) and compared with the
    non-streamed call: names, decoded arguments, number of calls, finish_reason (vllm#17161: arguments
    fragments lost or repeated in streaming; sglang#10995). Under tool_choice auto, or "required" when the model
    makes no call under auto."""
    plain, choice = answers.tool_answer(ctx), None
    if not plain.tool_calls:      # no call under auto: compare the forced call
        plain, choice = answers.required_answer(ctx), "required"
    if not plain.tool_calls:
        raise Skip('the model made no tool call, under tool_choice auto nor "required": nothing to compare')
    streamed = answers.tool_answer(ctx, stream=True, choice=choice)
    evidence = {"tool_choice": choice or "auto", "non_streamed": plain.summary(), "streamed": streamed.summary()}
    if plain.tool_calls and not streamed.tool_calls:
        yield Problem(f"the stream lost the call: the non-streamed answer calls {_calls_view(plain)}, the streamed "
                      f"one carries no tool call (finish {streamed.finish_reason!r}, content "
                      f"{streamed.content.strip()[:60]!r}); a parser that misses a call whose begin and end arrive "
                      f"in one delta (vllm#48020)", evidence=evidence)
        return
    if _calls_view(plain) != _calls_view(streamed):
        yield Problem(f"streamed tool calls {_calls_view(streamed)} differ from the non-streamed "
                      f"{_calls_view(plain)}", evidence=evidence)
        return
    if (plain.finish_reason or "") != (streamed.finish_reason or ""):
        yield Problem(f"finish_reason differs: {plain.finish_reason!r} non-streamed, {streamed.finish_reason!r} "
                      f"streamed", severity="warning", evidence=evidence)
        return
    yield Problem(f"streamed deltas assemble into the non-streamed call {_calls_view(plain)}", severity="info",
                  evidence=evidence)


@check("EPT073", category="endpoint", severity="error", needs=("endpoint", "tokenizer"),
       hint="serve a template that renders `tools` (the model's own, or a tool-use variant; llama.cpp --jinja "
            "--chat-template-file), or refuse tools at the gateway")
@asks_server
def tools_dropped(ctx: EndpointInputs):
    """The server accepts `tools` but the model never sees them.

    The reference renders the one-shot conversation with and without the tool definitions. When the model's
    template renders them, the server's prompt must too: its own rendering (llama.cpp /apply-template, vLLM
    /tokenize) must hold the tool description and usage.prompt_tokens must reach the reference's count with
    tools; a prompt without them is the server dropping tools (error). When the template never renders tools,
    a server that answers 200 with prose has silently dropped them (warning: the model cannot use tools as
    served)."""
    with_tools, without = answers.reference_tool_prompts(ctx)
    if with_tools is None or without is None:
        raise Skip("the reference template cannot render the one-shot tool conversation")
    answer = answers.tool_answer(ctx)
    served = answers.tools_prompt(ctx)
    n_with, n_without = answers.count(ctx, with_tools), answers.count(ctx, without)
    evidence = {**_evidence(answer, "auto"), "reference_prompt_tokens_with_tools": n_with,
                "reference_prompt_tokens_without_tools": n_without, "server_prompt_tokens": answer.prompt_tokens,
                "server_prompt": None if served is None else served[-1500:],
                "server_template_caps": template_caps(ctx.surface)}
    if with_tools == without:
        if not answer.tool_calls and (served is None or scenarios.DESCRIPTION not in served):
            yield Problem(f"the server accepted {len(scenarios.TOOLS)} tools and answered HTTP 200 with prose, but "
                          f"the chat template never renders tool definitions: the model never saw them",
                          severity="warning", evidence=evidence, location=TEMPLATE)
        return
    if served is not None and scenarios.DESCRIPTION not in served:
        yield Problem("the server's own prompt for the tool request holds no tool definition (the model's "
                      "template renders them): the server dropped `tools`", evidence=evidence, location=TEMPLATE)
        return
    if answer.prompt_tokens is not None and answer.prompt_tokens <= n_without < n_with:
        yield Problem(f"the server's prompt has {answer.prompt_tokens} tokens, the reference's {n_with} with the "
                      f"tool definitions and {n_without} without: the server dropped `tools`",
                      evidence=evidence, location=TEMPLATE)


@check("EPT074", category="endpoint", severity="warning", needs=("endpoint",),
       hint="notes on the server's tool_choice handling; constrain or check the calls in the client where it "
            "matters")
@asks_server
def tool_choice_handling(ctx: EndpointInputs):
    """What the server does with tool_choice "required" and a named function (notes, not errors of the model).

    Under "required" the answer must be a call; llama-server lets free text precede it. A named choice must call
    that function: the probe names get_time while the conversation asks for the weather, so a server that
    treats the named choice as "auto" (llama-server) answers with get_weather. A "required" answer with no call
    at all is a warning: the server accepted the constraint and did not apply it."""
    noted = 0
    for problem in _choice_notes(ctx):        # yielded as each answer comes (a later server error keeps them)
        noted += 1
        yield problem
    if not noted:
        yield Problem('tool_choice "required" and a named function are honoured', severity="info")


def _choice_notes(ctx: EndpointInputs):
    try:
        required = answers.required_answer(ctx)
    except Skip as e:
        yield Problem(str(e), severity="info")
    else:
        evidence = {"tool_choice": "required", "answer": required.summary()}
        if not required.tool_calls:
            yield Problem('tool_choice "required" was accepted but the answer holds no tool call',
                          severity="warning", evidence=evidence)
        elif required.content.strip():
            yield Problem(f'under tool_choice "required" the server lets free text precede the call: '
                          f'{required.content.strip()[:80]!r}', severity="info", evidence=evidence)
    try:
        named = answers.named_answer(ctx)
    except Skip as e:
        yield Problem(str(e), severity="info")
    else:
        names = [c.name for c in named.tool_calls]
        evidence = {"tool_choice": scenarios.NAMED_CHOICE, "answer": named.summary()}
        if names != [scenarios.NAMED]:
            yield Problem(f"a named tool_choice ({scenarios.NAMED}) is not enforced: the answer calls "
                          f"{names or 'nothing'} (the server treats it as 'auto')", severity="info",
                          evidence=evidence)
