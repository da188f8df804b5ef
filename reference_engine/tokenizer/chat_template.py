"""Render a model's chat template (jinja2) the way transformers does, but never trusting it.

Templates come from the model directory, so they are untrusted code: they run in jinja2's
ImmutableSandboxedEnvironment (no attribute access to internals, no mutation of passed objects),
with the globals, filters and tags transformers provides (`raise_exception`, `strftime_now`, `tojson`, and
`{% generation %}...{% endgeneration %}`, which marks the assistant's tokens for training masks and renders its
body unchanged: LFM2.5's and Laguna's templates use it).
"""
from __future__ import annotations

import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from reference_engine.errors import ModelDirError


class ChatTemplateError(ModelDirError):
    """The chat template is missing, does not compile, or refused the messages (raise_exception)."""


class TemplateRaised(Exception):
    """What `raise_exception(...)` inside a template raises; turned into ChatTemplateError."""


def _raise_exception(message):
    raise TemplateRaised(str(message))


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' tojson: unlike jinja's builtin it does not HTML-escape, so templates render identically.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class GenerationBlock(Extension):
    """`{% generation %}BODY{% endgeneration %}` renders BODY, as transformers' AssistantTracker does when no
    assistant mask is asked for (we never ask: the mask is for training)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render_chat_template(template: str, messages: list, *, add_generation_prompt: bool = True,
                         special_tokens: dict | None = None, source: str = "chat_template", **kwargs) -> str:
    """The prompt text; any template failure becomes a one-line ChatTemplateError naming `source`."""
    try:
        compiled = make_environment().from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(source, f"chat template does not compile: {e.message} (line {e.lineno})") from None
    variables = {**(special_tokens or {}), **kwargs, "messages": messages,
                 "add_generation_prompt": add_generation_prompt}
    try:
        return compiled.render(**variables)
    except TemplateRaised as e:
        raise ChatTemplateError(source, f"chat template refused the messages: {e}") from None
    except jinja2.exceptions.SecurityError as e:
        raise ChatTemplateError(source, f"chat template tried an unsafe operation: {e}") from None
    except Exception as e:  # a broken template can fail in many ways; report it in one line
        raise ChatTemplateError(source, f"chat template failed: {type(e).__name__}: {e}") from None


def apply_chat_template(tok, messages, *, add_generation_prompt=True, tokenize=False, chat_template=None,
                        **kwargs):
    """Render `messages` with the tokenizer's template; with tokenize=True return its ids (the
    template writes its own special tokens, so none are added, as in transformers)."""
    template = chat_template if chat_template is not None else tok.chat_template
    if not template:
        raise ChatTemplateError(tok.path, "no chat_template in tokenizer_config.json or chat_template.jinja")
    special = {name: tok.special_token(name) for name in
               ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")}
    text = render_chat_template(template, messages, add_generation_prompt=add_generation_prompt,
                                special_tokens=special, source=tok.path, **kwargs)
    return tok.encode(text, add_special_tokens=False) if tokenize else text
