"""EPT075: tool-call ids of another form in the conversation's history (Kimi K2's `functions.get_weather:0`, a bare
`call00003`) must not stop the model's next call from reaching the client."""
from __future__ import annotations

from checks.endpoint.chain import answers, scenarios
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check


@check("EPT075", category="endpoint", severity="error", needs=("endpoint",),
       hint="serve the model with a template and tool parser that carry every id form clients send back (Kimi "
            "K2: `functions.NAME:INDEX`); or rewrite history ids at the gateway to the form the parser expects")
@asks_server
def history_call_ids(ctx: EndpointInputs):
    """The next turn ends "stop" with no call once the history carries a tool-call id of another form.

    Clients send back the ids the server (or another provider) gave earlier calls. A template or parser that
    expects its own id form (Kimi K2's `functions.NAME:INDEX`) and gets `call00003`, or the reverse, renders a
    history the model does not follow or parses no call from its answer: the next turn ends "stop" with no call
    (the Kimi K2 reports on vLLM and SGLang). The one-shot tool conversation is asked with the earlier call's
    id `call_1` (tool_choice auto; EPT071's answer) and with each id of scenarios.HISTORY_IDS; where the first
    calls and another does not, the id is named."""
    plain = answers.tool_answer(ctx)
    if not plain.tool_calls:
        raise Skip("the model made no tool call with the history id 'call_1' under tool_choice auto: nothing to "
                   "compare")
    named = [c.name for c in plain.tool_calls]
    seen = []
    for call_id in scenarios.HISTORY_IDS:
        answer = answers.ask_chat(ctx, f"tools:id:{call_id}", scenarios.tool_request(call_id=call_id),
                                  feature="requests with `tools`")
        seen.append({"history_id": call_id, "answer": answer.summary()})
        if not answer.tool_calls:
            yield Problem(f"with the earlier call's id {call_id!r} in the history the answer ends "
                          f"{answer.finish_reason!r} with no tool call (content {answer.content.strip()[:60]!r}); "
                          f"with 'call_1' it calls {named}: the server's template or parser cannot carry that id",
                          evidence={"history_id": call_id, "with_call_1": plain.summary(), "answer": answer.summary()})
    if all(s["answer"]["tool_calls"] for s in seen):
        yield Problem(f"history ids {['call_1', *scenarios.HISTORY_IDS]} all lead to a call ({named})",
                      severity="info", evidence={"answers": seen})
