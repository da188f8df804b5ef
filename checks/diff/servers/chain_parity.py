"""DIF073: the same tool request and the same structured-output request to both servers: do they answer in the
same shape (a tool call with the same name and arguments, JSON with the same content), or does one refuse?"""
from __future__ import annotations

import json

from checks.diff.servers.requests import CHAIN_REQUESTS
from checks.catalogue.registry import Problem, check
from probes.endpoint import EndpointError
from probes.endpoint.chain import ChainAnswer, chat


def shape(answer: ChainAnswer | EndpointError) -> dict:
    """What the two answers are compared on: refused (and why), the calls (name, decoded arguments), the content
    as JSON when it reads as JSON, else as text."""
    if isinstance(answer, EndpointError):
        return {"refused": str(answer)[:300]}
    calls = []
    for call in answer.tool_calls:
        arguments, why = call.decoded()
        calls.append({"name": call.name, "arguments": arguments if why is None else call.arguments})
    try:
        content = json.loads(answer.content) if answer.content.strip() else None
    except ValueError:
        content = answer.content
    return {"tool_calls": calls, "content": content, "finish_reason": answer.finish_reason}


def differences(a: dict, b: dict) -> list[str]:
    """The fields on which two shapes differ, named."""
    if ("refused" in a) != ("refused" in b):
        side = "reference" if "refused" in a else "candidate"
        return [f"only the {side} refuses it ({(a if side == 'reference' else b)['refused'][:160]})"]
    if "refused" in a:
        return []
    out = []
    if [c["name"] for c in a["tool_calls"]] != [c["name"] for c in b["tool_calls"]]:
        out.append(f"tool calls {[c['name'] for c in a['tool_calls']]} vs {[c['name'] for c in b['tool_calls']]}")
    elif a["tool_calls"] != b["tool_calls"]:
        out.append("the same tools called with other arguments")
    if a["content"] != b["content"]:
        parsed = [isinstance(s["content"], (dict, list)) for s in (a, b)]
        only = "reference" if parsed[0] else "candidate"
        out.append("content differs" + (f" (JSON only from the {only})" if parsed[0] != parsed[1] else ""))
    return out


@check("DIF073", category="diff", severity="warning", needs=("servers",),
       hint="A tool or structured-output difference between two servers of the same model is their serving chain: "
            "the tool parser, the chat template (llama-server needs --jinja for tools), the grammar or "
            "guided-decoding backend; `probe endpoint URL --select EPT07,EPT08` judges each side.")
def chain_parity(ctx):
    """The servers answer the same tool request or structured-output request differently.

    One request with a tool (tool_choice auto) and one with a strict json_schema response_format, greedy, to
    both servers. Compared: refused or answered, the tool calls (names, arguments decoded from JSON), the
    content (as JSON when it parses). A difference is a warning naming what differs, both answers in evidence;
    both refusing the same request is info (a server setting both share)."""
    for name, request in CHAIN_REQUESTS.items():
        a, b = map(shape, ctx.ask_both(f"chain {name}", lambda side, r=request: chat(side.surface, dict(r))))
        found = differences(a, b)
        evidence = {"request": name, "reference": a, "candidate": b}
        if found:
            yield Problem(f"{name}: {'; '.join(found)}", evidence=evidence)
        elif "refused" in a:
            yield Problem(f"{name}: both servers refuse it", severity="info", evidence=evidence)
        else:
            yield Problem(f"{name}: the same answer on both servers", severity="info", evidence=evidence)
