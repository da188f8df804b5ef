"""Tool-use chat-template checks (TOK030-TOK033), for a template that mentions tools: it renders tool definitions,
an assistant tool call and a tool result; the definitions reach the prompt; the tool-call markers it writes are
single tokens; and the call it writes is read back by its family's parser (reference_engine/generate/tool_calls.py,
the one format table). All static: the template runs in the jinja2 sandbox, nothing is generated."""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check
from checks.shared.chat.end_of_turn import end_of_turn
from checks.shared.chat.tool_conversations import ASK, CALL, SECOND_CALL, TOOLS, render_tool_turns
from checks.tokenizer.chat_template import template_location
from reference_engine.generate.tool_calls import mentions_tools, parse_calls, recognise

EXCERPT = 300       # characters of rendered text kept in evidence


def _tool_template(ctx):
    tok = ctx.tokenizer
    if not tok.chat_template:
        raise Skip("no chat template (base model)")
    if not mentions_tools(tok.chat_template):
        raise Skip("the chat template does not mention tools")
    return tok


def _prompt(tok, *, tools=None, generation_prompt=True) -> str:
    extra = {"tools": tools} if tools is not None else {}
    return tok.apply_chat_template(list(ASK), add_generation_prompt=generation_prompt, tokenize=False, **extra)


def _prompt_or_skip(tok, **kw) -> str:
    try:
        return _prompt(tok, **kw)
    except Exception:       # TOK030 reports the template's failure; the others have nothing to read
        raise Skip("the chat template does not render a request with tools (TOK030)") from None


def _format_evidence(fmt) -> dict:
    return {"format": fmt.name, "families": fmt.families, "server_parsers": fmt.servers}


@check("TOK030", category="tokenizer", severity="error", needs=("tokenizer",),
       hint="Fix the template's tool branches (tools, assistant tool_calls, the tool role), or copy the original "
            "model's template.")
def tool_template_renders(ctx):
    """A chat template that mentions tools renders a request with tools, an assistant tool call and a tool result.

    Servers (vLLM, llama.cpp with --jinja, TGI, Ollama) render the template with the request's `tools` and, on the
    next turn, with the assistant's `tool_calls` and the `tool` messages holding the results. A template that
    raises there (an undefined attribute, a role it refuses, a filter the sandbox lacks) fails every tool request,
    usually with an opaque HTTP 400/500. Rendering runs in jinja2's sandbox; the assistant turn is tried with the
    arguments as an object (transformers' convention) and as the OpenAI JSON string, content None and "", and
    passes if any of them renders. Evidence names the tool-call format recognised from the template.

    Remedy: repair the template's tool branches, or copy the original model's template.
    """
    tok = _tool_template(ctx)
    fmt = recognise(tok.chat_template)
    evidence = _format_evidence(fmt) if fmt else {"format": None}
    try:
        _prompt(tok, tools=TOOLS)
    except Exception as e:
        yield Problem(f"chat template fails on a request with tools: {getattr(e, 'problem', e)}",
                      evidence={**evidence, "messages": ASK, "tools": TOOLS}, location=template_location(ctx, "tools"))
        return
    rendered = render_tool_turns(tok, [CALL])
    if rendered.text is None:
        yield Problem(f"chat template fails on an assistant tool call and its tool result: {rendered.error}",
                      evidence={**evidence, "error": rendered.error},
                      location=template_location(ctx, "tool_calls"))


@check("TOK031", category="tokenizer", severity="warning", needs=("tokenizer",),
       hint="Render the `tools` variable into the prompt (the original model's template shows where), or serve "
            "the model without tools.")
def tool_definitions_rendered(ctx):
    """A chat template that mentions tools writes the tool definitions into the prompt.

    A template can handle tool calls and tool results yet never render `tools` (a chat template copied from a
    sibling model, a hand-written one that forgot the block). Servers accept the request's tools, return HTTP 200,
    and the model answers in prose because it never saw them (llama-server does this silently). Caught by
    rendering the same request with and without one tool: the prompt must change and hold the tool's name, and
    the names of its parameters (the model cannot fill arguments it never saw). A warning, not an error: the model
    still chats, and some released templates (the DeepSeek R1 distills) never render tools.

    Remedy: render `tools` as the original model's template does (a system block, [AVAILABLE_TOOLS], the first
    user message), or serve the model without tools.
    """
    tok = _tool_template(ctx)
    with_tools = _prompt_or_skip(tok, tools=TOOLS)
    without = _prompt_or_skip(tok)
    function = TOOLS[0]["function"]
    fmt = recognise(tok.chat_template)
    evidence = {**(_format_evidence(fmt) if fmt else {"format": None}), "tool": function["name"],
                "prompt_with_tools": with_tools[-EXCERPT:]}
    if with_tools == without or function["name"] not in with_tools:
        how = "the prompt is identical with and without tools" if with_tools == without else \
            f"the tool's name {function['name']!r} never appears in the prompt"
        yield Problem(f"the chat template never renders the tool definitions: {how}", evidence=evidence,
                      location=template_location(ctx, "tools"))
    elif not all(name in with_tools for name in function["parameters"]["properties"]):
        yield Problem(f"the chat template renders the tool's name but not its parameters "
                      f"({', '.join(function['parameters']['properties'])})",
                      evidence=evidence, location=template_location(ctx, "tools"))


@check("TOK032", category="tokenizer", severity="warning", needs=("tokenizer",),
       hint="Add the tool-call markers as added (special) tokens in tokenizer.json with the ids the model was "
            "trained on.")
def tool_markers_atomic(ctx):
    """The tool-call markers the chat template writes (<tool_call>, [TOOL_CALLS], <|python_tag|>...) are single tokens.

    A tool-use model is trained with its call markers as one token each; servers and their grammars trigger on
    that token (llama.cpp's lazy grammar, vLLM's streaming parsers look for the marker's id). If the tokenizer
    splits "[TOOL_CALLS]" into "[", "TOOL", "_CALLS", "]" (markers lost in a conversion, a template copied onto a
    tokenizer without them) the model sees unfamiliar pieces in every earlier call and rarely emits the marker,
    so calls come back as text. The markers of the recognised format that the template writes (for the
    definitions, the call and the result) or holds as literals (branches such as Llama 3.1's built-in tools) are
    checked; a Llama 3.1 template on a Llama 3.0 tokenizer (where <|python_tag|> is a reserved token) is caught.

    Remedy: restore the markers as added tokens with their trained ids (and check their embedding rows, EMB001).
    """
    tok = _tool_template(ctx)
    fmt = recognise(tok.chat_template)
    if fmt is None:
        raise Skip("no known tool-call format in the template (see TOK033)")
    # markers rendered, and those the template's source can write on branches this conversation does not take
    # (Llama 3.1's <|python_tag|>/<|eom_id|> for built-in tools)
    text = _prompt_or_skip(tok, tools=TOOLS) + (render_tool_turns(tok, [CALL]).text or "") + tok.chat_template
    written = [m for m in fmt.markers if m in text]
    split = {m: tok.encode(m, add_special_tokens=False) for m in written}
    split = {m: ids for m, ids in split.items() if len(ids) != 1}
    if split:
        first = next(iter(split))
        pieces = {m: tok.convert_ids_to_tokens(ids[:12]) for m, ids in split.items()}
        yield Problem(f"{len(split)} {fmt.name} tool-call marker(s) the template writes are not single tokens, "
                      f"e.g. {first!r} -> {len(split[first])} tokens {pieces[first][:6]}",
                      evidence={**_format_evidence(fmt), "markers": {m: ids[:12] for m, ids in split.items()},
                                "pieces": pieces, "single": [m for m in written if m not in split]},
                      location=template_location(ctx, first))


def _trim_end(tok, fmt, text: str) -> str:
    """Drop the end-of-turn/EOS and other special tokens closing the turn (not the format's own markers):
    generation stops before them, so the text a server's parser reads never holds them."""
    ends = {t for t in (tok.eos_token, (end_of_turn(tok) or (None, None))[1]) if t}
    ends |= set(tok.special_contents) - set(fmt.markers if fmt else ())
    for _ in range(4):
        text = text.rstrip()
        end = next((e for e in ends if text.endswith(e)), None)
        if end is None:
            break
        text = text[:-len(end)]
    return text


def call_segment(tok, fmt, calls) -> tuple[str | None, str, str | None]:
    """(what the template writes for the assistant's calls, the generation prompt's own tail, error): the full
    render minus the request's render with the generation prompt, the turn's closing tokens trimmed. The tail
    is the part of the generation prompt past the plain prompt (Functionary's ">>>"); a parser may need it."""
    rendered = render_tool_turns(tok, calls, results=False)
    if rendered.text is None:
        return None, "", rendered.error
    try:
        plain, prompt = _prompt(tok, tools=TOOLS, generation_prompt=False), _prompt(tok, tools=TOOLS)
    except Exception as e:      # a template may refuse a conversation ending on the user without the prompt
        return None, "", getattr(e, "problem", None) or f"{type(e).__name__}: {e}"
    tail = prompt[len(plain):] if prompt.startswith(plain) else ""
    for base in (prompt, plain):
        if rendered.text.startswith(base):
            segment = rendered.text[len(base):]
            return _trim_end(tok, fmt, segment), tail if base is prompt else "", None
    common = next((i for i, (a, b) in enumerate(zip(rendered.text, plain)) if a != b), len(plain))
    return _trim_end(tok, fmt, rendered.text[common:]), "", None


def _read_back(fmt, segment: str, tail: str):
    """The segment alone, or with the generation prompt's tail (Functionary's ">>>"): whichever reads more."""
    readings = [parse_calls(fmt, segment)] + ([parse_calls(fmt, tail + segment)] if tail else [])
    return max(readings, key=lambda parsed: len(parsed.calls))


def _same(parsed, calls) -> bool:
    return [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls]


@check("TOK033", category="tokenizer", severity="warning", needs=("tokenizer",),
       hint="Make the template write calls exactly as the family's parser reads them (compare with the original "
            "model's template), or serve it with the parser that matches what it writes.")
def tool_call_round_trip(ctx):
    """The tool call the chat template writes for an assistant turn is read back by its family's parser.

    A model imitates the calls it sees in its prompt, and the server's parser (chosen by the format the template
    is recognised as, as llama.cpp and vLLM do) must read what the model writes. A template that writes calls in
    another shape (arguments double-encoded as a string, a missing closing tag, "parameters" where the parser
    wants "arguments", the call outside its markers) teaches the model calls the parser leaves as raw text in
    `content`. Caught by rendering one call (and two, where the format carries several) and reading the
    assistant's part back with the recognised format's parser from the one table; the name and the arguments
    object must match. A template that drops the calls from history, refuses two calls, or whose format no known
    parser reads is noted (info).

    Remedy: write calls as the family's parser reads them (the original model's template does), or serve the model
    with a parser that matches its template.
    """
    tok = _tool_template(ctx)
    _prompt_or_skip(tok, tools=TOOLS)
    fmt = recognise(tok.chat_template)
    segment, tail, error = call_segment(tok, fmt, [CALL])
    if segment is None:
        raise Skip(f"the template does not render a tool call (TOK030): {error}")
    if fmt is None:
        yield Problem("no known tool-call format: servers need a parser written for this template",
                      severity="info", evidence={"format": None, "written": segment[:EXCERPT]})
        return
    evidence = _format_evidence(fmt)
    parsed = _read_back(fmt, segment, tail)
    if _same(parsed, [CALL]):
        yield from _two_calls(tok, fmt, evidence)
        return
    if not parsed.calls and CALL.name not in segment:
        yield Problem(f"the template drops the assistant's tool calls from the conversation ({fmt.name} format): "
                      f"the model never sees its earlier calls", severity="info",
                      evidence={**evidence, "written": segment[:EXCERPT]},
                      location=template_location(ctx, "tool_calls"))
        return
    yield Problem(f"the {fmt.name} parser does not read back the call the template writes: "
                  f"{_difference(parsed, [CALL])}",
                  evidence={**evidence, "written": segment[:EXCERPT], "expected": _calls([CALL]),
                            "parsed": _calls(parsed.calls), "parser_errors": parsed.errors[:5]},
                  location=template_location(ctx, "tool_calls"))


def _two_calls(tok, fmt, evidence):
    """Several calls in one turn, where the format carries them: each must come back, in order."""
    if not fmt.parallel:
        return
    segment, tail, error = call_segment(tok, fmt, [CALL, SECOND_CALL])
    if segment is None:
        yield Problem(f"the template refuses two tool calls in one assistant turn: {error}", severity="info",
                      evidence={**evidence, "error": error})
        return
    parsed = _read_back(fmt, segment, tail)
    if not _same(parsed, [CALL, SECOND_CALL]):
        yield Problem(f"the {fmt.name} parser does not read back the two calls the template writes in one turn: "
                      f"{_difference(parsed, [CALL, SECOND_CALL])}",
                      evidence={**evidence, "written": segment[:EXCERPT], "expected": _calls([CALL, SECOND_CALL]),
                                "parsed": _calls(parsed.calls), "parser_errors": parsed.errors[:5]})


def _calls(calls) -> list[dict]:
    return [{"name": c.name, "arguments": c.arguments} for c in calls]


def _difference(parsed, calls) -> str:
    if not parsed.calls:
        return "no call read" + (f" ({parsed.errors[0]})" if parsed.errors else "")
    if len(parsed.calls) != len(calls):
        return f"{len(parsed.calls)} call(s) read, {len(calls)} written"
    got, want = next((g, w) for g, w in zip(parsed.calls, calls) if (g.name, g.arguments) != (w.name, w.arguments))
    return (f"name {got.name!r} read, {want.name!r} written" if got.name != want.name else
            f"arguments {got.arguments} read, {want.arguments} written")
