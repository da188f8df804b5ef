"""Harmony, gpt-oss's chat format: messages on channels, and tool calls addressed to a recipient.

A harmony message is `<|start|>{role}[ to={recipient}]<|channel|>{channel}[ to={recipient}][ <|constrain|>]
[{content type}]<|message|>{text}` closed by `<|end|>` (more follows), `<|return|>` (the final answer ends
generation) or `<|call|>` (a tool call ends generation). The assistant thinks on the `analysis` channel,
calls functions on `commentary` (`to=functions.NAME`, JSON arguments) and answers on `final`. What a server must
split: analysis -> the reasoning field, final -> content, calls -> tool_calls; any `<|channel|>` markup left in
content (or the final answer in the reasoning field) is its parser failing (sglang#9190, vllm#23694,
llama.cpp#15789). The recipient may stand in the header before or after the channel (the template writes
`<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{..}<|call|>`; models also write
`<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{..}<|call|>`): both are read.
"""
from __future__ import annotations

from dataclasses import dataclass

import regex

from reference_engine.generate.tool_call_types import ParsedCalls, ToolCall, call_from_object, dumps, read_json

START, END, MESSAGE, CHANNEL, CALL, RETURN, CONSTRAIN = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                                                         "<|call|>", "<|return|>", "<|constrain|>")
MARKERS = (START, END, MESSAGE, CHANNEL, CALL, RETURN, CONSTRAIN)
CALL_MARKER = "to=functions."
# one message header: optional start and role, the recipient before or after the channel, the content type
_HEADER = regex.compile(r"(?:<\|start\|>\s*(?P<role>[^<\s]+))?\s*(?:to=(?P<to1>[^\s<]+)\s*)?"
                        r"<\|channel\|>\s*(?P<channel>\w+)\s*(?:to=(?P<to2>[^\s<]+)\s*)?"
                        r"(?:<\|constrain\|>\s*)?(?P<ctype>[\w/]+)?\s*<\|message\|>")
_ENDS = regex.compile(r"<\|end\|>|<\|return\|>|<\|call\|>")
# what is left of a header once a server decodes without its special tokens ("analysis", "assistantfinal",
# "assistantcommentary to=functions.get_weather json{..}": llama.cpp#15789, vllm#23694)
STRIPPED = regex.compile(r"^\s*(?:analysis|commentary|final)(?=[A-Z])|assistant(?:analysis|commentary|final)")
_BARE_CALL = regex.compile(r"to=functions\.([\w\-]+)(?:\s*(?:<\|constrain\|>)?\s*json)?\s*(?:<\|message\|>)?")


@dataclass
class HarmonyMessage:
    channel: str
    recipient: str | None
    text: str
    start: int            # where its header begins in the generated text
    end: int              # after its closing marker (or the text's end)


def messages(text: str) -> list[HarmonyMessage]:
    """The harmony messages in generated text, in order (text outside any header is not a message)."""
    out = []
    for head in _HEADER.finditer(text or ""):
        close = _ENDS.search(text, head.end())
        body_end = close.start() if close else len(text)
        out.append(HarmonyMessage(head.group("channel"), head.group("to1") or head.group("to2"),
                                  text[head.end():body_end], head.start(), close.end() if close else len(text)))
    return out


def has_markup(text: str) -> list[str]:
    """The harmony control strings present in a text (a client's content must hold none), or what is left of
    a header decoded without its special tokens ("analysisThe user asks...", "assistantfinal")."""
    found = [m for m in MARKERS if m in (text or "")]
    stripped = STRIPPED.search(text or "")
    return found + ([f"{stripped.group(0).strip()!r} (a header without its special tokens)"] if stripped else [])


def split(text: str) -> dict[str, str]:
    """Generated text split the way a harmony server's parser must: {"reasoning": analysis text, "content":
    final text}; text before any header (the generation prompt opened the turn) counts as content."""
    found = messages(text)
    analysis = "".join(m.text for m in found if m.channel == "analysis")
    final = "".join(m.text for m in found if m.channel == "final" and not m.recipient)
    head = text[:found[0].start] if found else text
    return {"reasoning": analysis, "content": (head + final).strip()}


def render_calls(calls: list[ToolCall]) -> str:
    """What a gpt-oss model generates for its calls after the generation prompt `<|start|>assistant`: one
    message per call, each ending generation with <|call|> (the template renders one call per assistant turn)."""
    parts = [f" to=functions.{c.name}{CHANNEL}commentary json{MESSAGE}{dumps(c.arguments)}{CALL}" for c in calls]
    return f"{START}assistant".join(parts)


def parse_calls(text: str) -> ParsedCalls:
    """Calls addressed to functions.NAME on any channel; the other messages' markup is left in `content` (a
    parser that reads the calls and leaves channel markup behind is what EPT071/EPT081 report)."""
    text = text or ""
    # the generation prompt ends with `<|start|>assistant`: a call in generated text may begin at its recipient
    calls, spans, errors = [], [], []
    heads = [(m.recipient, m.text, m.start, m.end) for m in messages(text)]
    if not heads:       # the markup stripped by the server: the recipient, then the JSON
        heads = [("functions." + h.group(1), text[h.end():], h.start(), None) for h in _BARE_CALL.finditer(text)]
    for recipient, body, start, end in heads:
        if not (recipient or "").startswith("functions."):
            continue
        name = recipient[len("functions."):]
        found = read_json(body)
        call, why = call_from_object({"name": name, "arguments": found[0]}) if found else (
            None, f"functions.{name}: the message is not JSON: {body[:80]!r}")
        if call is None:
            errors.append(why)
            continue
        calls.append(call)
        spans.append((start, end if end is not None else len(text) - len(body) + found[1]))
    content, last = [], 0
    for start, end in spans:
        content.append(text[last:start])
        last = end
    content.append(text[last:])
    return ParsedCalls("harmony", calls, "".join(content).strip(), errors)
