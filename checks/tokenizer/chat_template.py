"""Chat-template checks (TOK007-TOK009): the template renders system/user/assistant turns in the sandbox, its role
markers are single tokens, and a rendered prompt does not start with BOS twice (the template's BOS plus the tokenizer's
own is a note: runtimes that render templates do not add the second)."""
from __future__ import annotations

import regex

from checks.catalogue.registry import Problem, Skip, check
from checks.shared.chat.conversations import NO_SYSTEM, USER_ONLY, WITH_SYSTEM
from findings import Location
from reference_engine.errors import ModelDirError

# role markers as templates write them: <|im_start|>, <|start_header_id|>, <start_of_turn>, </s>
MARKER = regex.compile(r"<\|[^<>|\s]{1,40}\|>|</?[A-Za-z_][A-Za-z0-9_\-]{0,40}>")


def template_location(ctx, needle: str | None = None) -> Location:
    """The template's place: the line of chat_template.jinja holding `needle` (or of a syntax error), else the
    chat_template key of tokenizer_config.json (the whole template is one JSON string there)."""
    path = ctx.model_dir / "chat_template.jinja"
    if not path.is_file():
        return Location(file="tokenizer_config.json", logical="chat_template")
    text = path.read_text(encoding="utf-8", errors="replace")
    line = _syntax_error_line(text) if needle is None else next(
        (i for i, row in enumerate(text.splitlines(), 1) if needle in row), None)
    return Location(file="chat_template.jinja", line=line or 1, logical="chat_template")


def _syntax_error_line(text: str) -> int | None:
    """The line jinja2's parser stops at (parsing only: nothing of the template runs)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    try:
        ImmutableSandboxedEnvironment().parse(text)
    except jinja2.TemplateSyntaxError as e:
        return e.lineno
    return None


def _render(tok, messages, add_generation_prompt=True) -> str:
    return tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)


def _template_or_skip(ctx):
    tok = ctx.tokenizer
    if not tok.chat_template:
        raise Skip("no chat template (base model)")
    return tok


@check("TOK008", category="tokenizer", severity="error", needs=("tokenizer",),
       hint="Fix the template in tokenizer_config.json (or chat_template.jinja) so it renders user/assistant turns.")
def chat_template_renders(ctx):
    """The chat template renders user, assistant and system turns (in a jinja2 sandbox).

    Serving stacks render the template for every request; one that raises, refers to an undefined
    variable or loops on a message key the client does not send breaks every chat request. Rendering
    happens in jinja2's ImmutableSandboxedEnvironment with transformers' globals (raise_exception,
    strftime_now, tojson); the template is never executed outside it. A template that rejects only
    the system role on purpose (some Mistral/Gemma templates) is noted as info. A model without a
    template is noted as info (base models have none; chat use needs one).

    Remedy: repair the template, or copy the original model's.
    """
    tok = ctx.tokenizer
    if not tok.chat_template:
        yield Problem("no chat template: apply_chat_template cannot be used (base model?)", severity="info",
                      evidence={"chat_template": None},
                      location=Location(file="tokenizer_config.json", logical="chat_template"))
        return
    for label, messages in (("a user message", USER_ONLY), ("user/assistant turns", NO_SYSTEM)):
        try:
            _render(tok, messages)
        except ModelDirError as e:
            yield Problem(f"chat template fails on {label}: {e.problem}", evidence={"messages": messages},
                          location=template_location(ctx))
            return
    try:
        _render(tok, WITH_SYSTEM)
    except ModelDirError as e:
        yield Problem(f"chat template rejects a system message: {e.problem}", severity="info",
                      evidence={"messages": WITH_SYSTEM}, location=template_location(ctx, "system"))


def _rendered_or_skip(tok) -> str:
    for messages in (WITH_SYSTEM, NO_SYSTEM, USER_ONLY):
        try:
            return _render(tok, messages)
        except ModelDirError:
            continue
    raise Skip("the chat template does not render (TOK008)")


@check("TOK007", category="tokenizer", severity="warning", needs=("tokenizer",),
       hint="Encode rendered prompts with add_special_tokens=False (as apply_chat_template, vLLM and llama.cpp do), "
            "or drop bos_token from the template; a template that writes BOS twice must write it once.")
def double_bos(ctx):
    """A rendered chat prompt does not start with BOS twice.

    A template that itself writes BOS twice at the start (`{{ bos_token }}` before a turn that writes it again)
    feeds <BOS><BOS> to every runtime, which measurably degrades output: a warning.

    Templates such as Llama 3's and Mistral's write `{{ bos_token }}` while the tokenizer also adds BOS
    (add_bos_token / its post-processor). That pairing is how these models ship and is not a fault: every runtime
    that renders templates (transformers' apply_chat_template, vLLM, llama.cpp since PR #7332) encodes the
    rendered text without adding BOS again. Code that renders to text and then encodes with the defaults (raw
    completions endpoints, hand-written pipelines) sends two; that hazard is noted (info).

    Remedy: encode rendered prompts with add_special_tokens=False, or remove bos_token from the template; a
    template that writes BOS twice must be fixed.
    """
    tok = _template_or_skip(ctx)
    bos = tok.bos_token_id
    if bos is None:
        raise Skip("no BOS token")
    rendered = _rendered_or_skip(tok)
    plain = tok.encode(rendered, add_special_tokens=False)
    if plain[:2] == [bos, bos]:
        yield Problem(f"the template writes {tok.bos_token!r} twice: the rendered prompt {rendered[:40]!r} starts "
                      f"with BOS twice ({plain[:4]}...) before any tokenizer adds one",
                      evidence={"input": rendered[:200], "first_ids": plain[:4], "bos_token_id": bos},
                      location=template_location(ctx, "bos_token"))
        return
    ids = tok.encode(rendered, add_special_tokens=True)
    if ids[:2] == [bos, bos]:
        yield Problem(f"the template writes {tok.bos_token!r} and the tokenizer adds BOS too: runtimes that render "
                      f"templates encode without adding it again, but code that renders and then encodes with the "
                      f"defaults sends BOS twice ({rendered[:40]!r} -> {ids[:4]}...)", severity="info",
                      evidence={"input": rendered[:200], "first_ids": ids[:4], "bos_token_id": bos,
                                "add_bos_token": tok.add_bos_token},
                      location=template_location(ctx, "bos_token"))


@check("TOK009", category="tokenizer", severity="warning", needs=("tokenizer",),
       hint="Add the role markers as special tokens in tokenizer.json (added_tokens) with ids the model was "
            "trained on.")
def role_tokens_atomic(ctx):
    """Role markers the chat template writes (<|im_start|>, <|start_header_id|>, <start_of_turn>...) are single tokens.

    Chat models are trained with role markers as one special token each; if the tokenizer splits
    "<|im_start|>" into "<", "|", "im", "_start", "|", ">" the model sees an unfamiliar sequence at
    every turn boundary and answers poorly or never stops. This happens when a template is copied onto
    a base tokenizer that lacks the tokens, or the added tokens were lost in a conversion.

    Remedy: add the markers as special tokens (and make sure their embedding rows are trained, EMB001).
    """
    tok = _template_or_skip(ctx)
    markers = sorted(set(MARKER.findall(_rendered_or_skip(tok))))
    split = {m: tok.encode(m, add_special_tokens=False) for m in markers}
    split = {m: ids for m, ids in split.items() if len(ids) != 1}
    if split:
        first = next(iter(split))
        yield Problem(f"{len(split)} role marker(s) are not single tokens, e.g. {first!r} -> {len(split[first])} "
                      f"tokens", evidence={"markers": {m: ids[:12] for m, ids in split.items()}},
                      location=template_location(ctx, first))
