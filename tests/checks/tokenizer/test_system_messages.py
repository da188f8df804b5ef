"""TOK035: a system message the chat template drops without an error, named by its place in the conversation.
gpt-oss's released template keeps only the first system message (vllm#44330); Qwen2.5's and Llama 3.1's keep
every one."""
from __future__ import annotations

import pytest

from tests.checks.tokenizer.test_tool_template import fired, findings, tool_model

SYSTEM_LESS = ("{% for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
               "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_gpt_oss_template_drops_every_later_system_message(broken_copy):
    report = findings(tool_model(broken_copy, "openai-gpt-oss-120b"), select=["TOK035"])
    dropped = [(f.evidence["shape"], f.message.split(" of the ")[0]) for f in report.findings
               if f.severity.value == "warning"]
    later = "the template drops message {} (system: 'From now on, answer in German.')"
    assert dropped == [("two system messages", later.format(1)), ("system mid-conversation", later.format(3)),
                       ("system after the first turn only", later.format(2))]
    assert [f for f in fired(report) if f[1] == "error"] == []
    assert report.findings[0].location.logical == "chat_template"


@pytest.mark.parametrize("name", ["qwen2.5-7b-instruct", "llama-3.1-8b-instruct"])
def test_templates_that_render_every_system_message_are_quiet(broken_copy, name):
    report = findings(tool_model(broken_copy, name), select=["TOK035"])
    assert fired(report) == [("TOK035", "info")]
    assert "every message reaches the prompt" in report.findings[0].message


def test_a_template_without_a_system_branch_drops_the_only_one_as_an_error(broken_copy):
    report = findings(tool_model(broken_copy, "qwen2.5-7b-instruct", template=SYSTEM_LESS), select=["TOK035"])
    levels = [(f.evidence["shape"], f.severity.value) for f in report.findings if f.severity.value != "info"]
    assert levels[0] == ("system first", "error")
    assert "drops message 0 (system: 'Answer every question in French.')" in report.findings[0].message
    assert {level for shape, level in levels[1:]} == {"warning"}      # a second system message dropped as well



def test_deepseek_r1_template_keeps_the_last_of_two_system_messages(broken_copy):
    """llama.cpp's copy of DeepSeek-R1-Distill-Qwen's template: each system message overwrites the one before, so
    the first of two never reaches the prompt (a warning: the conversation keeps one)."""
    from tests.assets_gguf import llamacpp_chat_templates
    text = llamacpp_chat_templates()["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"]
    report = findings(tool_model(broken_copy, "deepseek-r1-distill-qwen-32b", template=text), select=["TOK035"])
    dropped = [(f.evidence["shape"], f.severity.value) for f in report.findings if f.severity.value != "info"]
    assert dropped == [("two system messages", "warning"), ("system mid-conversation", "warning")]
    assert all("drops message 0 (system" in f.message for f in report.findings if f.severity.value == "warning")
