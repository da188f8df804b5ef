"""Tokenizer checks on real tokenizers (llama.cpp's test vocabularies converted by transformers: no false
positives) and TOK007: a template writing bos_token while the tokenizer adds BOS (Llama 3 and Mistral ship that
way) is a note, a template writing BOS twice a warning."""
from __future__ import annotations

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks import zoo


def fired(model_dir, select):
    report = run_checks(model_dir, select=select)
    assert all(c.status != "crashed" for c in report.checks), [c.reason for c in report.checks]
    return [(f.check, f.severity.value) for f in report.findings]


@pytest.mark.assets
@pytest.mark.parametrize("name", ["gpt-2", "llama-bpe", "qwen2", "llama-spm"])
def test_real_tokenizers_have_no_problems(name, llamacpp_tokenizer_dir):
    assert [f for f in fired(llamacpp_tokenizer_dir(name), ["tokenizer"]) if f[1] != "info"] == []


def test_double_bos_noted_when_the_template_writes_bos_and_warned_when_it_writes_two(factory_model_dir,
                                                                                     broken_copy):
    from reference_engine.testing.factory import CHAT_TEMPLATE
    assert fired(factory_model_dir("llama"), ["TOK007", "TOK008", "TOK009"]) == []
    d = broken_copy("llama", zoo.edit_json("tokenizer_config.json", chat_template="{{ bos_token }}" + CHAT_TEMPLATE))
    assert fired(d, ["TOK007"]) == [("TOK007", "info")]
    twice = "{{ bos_token }}{{ bos_token }}" + CHAT_TEMPLATE
    d = broken_copy("llama", zoo.edit_json("tokenizer_config.json", chat_template=twice))
    assert fired(d, ["TOK007"]) == [("TOK007", "warning")]
    report = run_checks(d, select=["TOK007"])
    assert "twice" in report.findings[0].message and report.findings[0].location.logical == "chat_template"


def test_a_template_with_generation_blocks_renders(broken_copy):
    """{% generation %} (LFM2.5, Laguna: transformers' assistant-mask tag) is no TOK008 failure."""
    from reference_engine.testing.factory import CHAT_TEMPLATE
    wrapped = CHAT_TEMPLATE.replace("{% for message in messages %}", "{% for message in messages %}{% generation %}")
    wrapped = wrapped.replace("{% endfor %}", "{% endgeneration %}{% endfor %}")
    assert wrapped != CHAT_TEMPLATE
    d = broken_copy("llama", zoo.edit_json("tokenizer_config.json", chat_template=wrapped))
    assert fired(d, ["TOK007", "TOK008", "TOK009"]) == []


def test_nfkc_leaves_unaffected_probes_to_round_trip(broken_copy):
    # NFKC rewrites only the full-width/ligature probe; a broken decoder on top must still be an error
    d = broken_copy("llama", zoo.both(zoo.edit_tokenizer(zoo.nfkc), zoo.edit_tokenizer(zoo.no_decoder)))
    assert ("TOK005", "error") in fired(d, ["TOK005"])
