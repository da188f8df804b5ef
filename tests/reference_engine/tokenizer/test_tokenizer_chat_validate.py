"""Chat templates in the jinja2 sandbox, and Tokenizer.validate() firing / staying silent."""
from __future__ import annotations

import json

import pytest

from reference_engine.tokenizer.chat_template import ChatTemplateError
from reference_engine.tokenizer.tokenizer import Tokenizer
from reference_engine.tokenizer.validate import chat_template_double_bos
from tests.reference_engine.tokenizer import tokenizer_cases as cases

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \"there\" ü"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{% continue %}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] | tojson }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tok(template=TEMPLATE, family="gpt2") -> Tokenizer:
    tok = cases.ours(family)
    tok.chat_template = template
    return tok


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_renders_like_transformers(add_generation_prompt):
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast(tokenizer_object=cases.hf("gpt2"), bos_token="<|begin_of_text|>",
                                        eos_token="<|endoftext|>")
    expected = reference.apply_chat_template(MESSAGES, chat_template=TEMPLATE, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    tok = _tok()
    assert tok.apply_chat_template(MESSAGES, add_generation_prompt=add_generation_prompt) == expected
    assert tok.apply_chat_template(MESSAGES, add_generation_prompt=add_generation_prompt, tokenize=True) == \
        tok.encode(expected, add_special_tokens=False)


# LFM2.5 / Laguna style: the assistant's turns inside {% generation %} (transformers' assistant-mask tag)
GENERATION_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_generation_blocks_render_like_transformers(add_generation_prompt):
    from transformers import PreTrainedTokenizerFast

    reference = PreTrainedTokenizerFast(tokenizer_object=cases.hf("gpt2"), bos_token="<|begin_of_text|>",
                                        eos_token="<|endoftext|>")
    expected = reference.apply_chat_template(MESSAGES, chat_template=GENERATION_TEMPLATE, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    assert "Hello.<|im_end|>" in expected
    assert _tok(GENERATION_TEMPLATE).apply_chat_template(MESSAGES,
                                                         add_generation_prompt=add_generation_prompt) == expected


@pytest.mark.parametrize("template, message", [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
    ("{% set _ = messages.append({'role': 'x'}) %}", "unsafe"),
    ("{{ raise_exception('Conversation roles must alternate') }}", "refused the messages: Conversation roles"),
    ("{% for m in messages %}", "does not compile"),
    ("{{ messages[0]['content'] | no_such_filter }}", "does not compile"),
    ("{{ 1 / 0 }}", "ZeroDivisionError"),
])
def test_template_failures_are_one_line_errors(template, message):
    with pytest.raises(ChatTemplateError, match=message) as error:
        _tok(template).apply_chat_template(MESSAGES)
    assert "\n" not in str(error.value)


def test_missing_template_is_a_clear_error():
    with pytest.raises(ChatTemplateError, match="no chat_template"):
        _tok(None).apply_chat_template(MESSAGES)


def test_config_template_list_form_uses_default():
    tok = Tokenizer.from_json(cases.spec_json("gpt2"), {"chat_template": [
        {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})
    assert tok.apply_chat_template(MESSAGES) == "D"


# -- validate() --------------------------------------------------------------------------------

@pytest.mark.parametrize("family", cases.FAMILIES)
def test_validate_is_silent_on_healthy_tokenizers(family):
    assert cases.ours(family).validate() == []


def test_double_bos_pitfall_is_reported_separately():
    tok = _tok(family="llama3")  # post-processor adds BOS, and the template writes bos_token too
    assert tok.validate() == []  # Llama-3's own layout: not an invariant violation
    assert "BOS twice" in chat_template_double_bos(tok)
    assert chat_template_double_bos(_tok(family="gpt2")) is None  # gpt2 adds no BOS


def test_validate_flags_missing_special_token():
    tok = Tokenizer.from_json(cases.spec_json("gpt2"), {"bos_token": "<s>"})
    assert tok.validate() == ["bos_token '<s>' is not in the vocabulary"]


def test_validate_flags_ids_beyond_the_vocabulary():
    spec = json.loads(cases.spec_json("qwen2"))
    spec["added_tokens"].append({"id": 5000, "content": "<|far|>", "special": True, "normalized": False})
    problems = Tokenizer.from_json(spec).validate(["x<|far|>"])
    assert problems == ["probe 'x<|far|>': ids [5000] are outside the vocabulary (len 901)"]


def test_validate_flags_a_decoder_that_does_not_invert_the_encoder():
    spec = json.loads(cases.spec_json("gpt2"))
    spec["decoder"] = {"type": "Metaspace", "replacement": "Ġ", "prepend_scheme": "always"}  # wrong decoder
    problems = Tokenizer.from_json(spec).validate(["Hello world, ünïcode"])
    assert any("encode(decode(ids)) != ids" in p for p in problems), problems


def test_validate_never_raises():
    tok = cases.ours("gpt2")

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    tok.encode = broken
    problems = tok.validate()
    assert problems and all("raised RuntimeError: boom" in p for p in problems)
