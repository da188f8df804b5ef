"""gpt-oss's real chat template (llama.cpp's copy of the one openai/gpt-oss-120b ships) rendered in our jinja2
sandbox, against openai-harmony's renderer (the format's own implementation, loaded offline: tests/harmony_assets.py);
and the harmony call format and channel split (reference_engine/generate/harmony.py) against openai-harmony's parser.
"""
from __future__ import annotations

import datetime
import json

import pytest

from checks.shared.chat.tool_conversations import WEATHER_TOOL
from reference_engine.generate import harmony
from reference_engine.generate.tool_call_types import ToolCall
from reference_engine.tokenizer.chat_template import render_chat_template
from tests.checks.tokenizer.test_tool_template import TEMPLATES

pytestmark = pytest.mark.assets
TEMPLATE = (TEMPLATES / "openai-gpt-oss-120b.jinja").read_text(encoding="utf-8")
ASK = "What is the weather like in Paris today?"
ARGUMENTS = {"city": "Paris", "unit": "celsius"}


@pytest.fixture(scope="module")
def encoding():
    from tests.harmony_assets import harmony_encoding
    return harmony_encoding()


def oracle(encoding, *, tools: bool, history: list) -> str:
    """openai-harmony's prompt for: system (today's date, medium effort), developer (the tool), history, then the
    assistant's turn."""
    from openai_harmony import (Conversation, DeveloperContent, Message, ReasoningEffort, Role, SystemContent,
                                ToolDescription)
    system = SystemContent.new().with_conversation_start_date(datetime.date.today().isoformat()) \
        .with_reasoning_effort(ReasoningEffort.MEDIUM)
    messages = [Message.from_role_and_content(Role.SYSTEM, system)]
    if tools:
        f = WEATHER_TOOL["function"]
        developer = DeveloperContent.new().with_function_tools(
            [ToolDescription.new(f["name"], f["description"], parameters=f["parameters"])])
        messages.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    ids = encoding.render_conversation_for_completion(Conversation.from_messages(messages + history), Role.ASSISTANT)
    return encoding.decode_utf8(ids)


def test_a_tool_call_conversation_renders_as_openai_harmony_renders_it(encoding):
    """System and developer messages (the tool as a TypeScript namespace), the user turn, the assistant's call on
    the commentary channel and the generation prompt: character for character."""
    from openai_harmony import Message, Role
    call = Message.from_role_and_content(Role.ASSISTANT, json.dumps(ARGUMENTS)).with_channel("commentary") \
        .with_recipient("functions.get_weather").with_content_type("json")
    theirs = oracle(encoding, tools=True, history=[Message.from_role_and_content(Role.USER, ASK), call])
    ours = render_chat_template(TEMPLATE, [{"role": "user", "content": ASK},
                                           {"role": "assistant", "content": "", "tool_calls": [ToolCall(
                                               "get_weather", ARGUMENTS).as_message_call()]}], tools=[WEATHER_TOOL])
    assert ours == theirs


def test_a_chat_with_an_earlier_final_answer_renders_as_openai_harmony_renders_it(encoding):
    from openai_harmony import Message, Role
    history = [Message.from_role_and_content(Role.USER, "Hi"),
               Message.from_role_and_content(Role.ASSISTANT, "Hello! How can I help?").with_channel("final"),
               Message.from_role_and_content(Role.USER, ASK)]
    ours = render_chat_template(TEMPLATE, [{"role": "user", "content": "Hi"},
                                           {"role": "assistant", "content": "Hello! How can I help?"},
                                           {"role": "user", "content": ASK}])
    assert ours == oracle(encoding, tools=False, history=history)


def test_the_template_json_encodes_a_tool_result_string(encoding):
    """The one difference from openai-harmony, and it is the template's: a tool message's content goes through
    `|tojson`, so a result string arrives quoted (harmony writes the text as is)."""
    from openai_harmony import Author, Message, Role
    result = json.dumps({"temperature": 22})
    call = Message.from_role_and_content(Role.ASSISTANT, json.dumps(ARGUMENTS)).with_channel("commentary") \
        .with_recipient("functions.get_weather").with_content_type("json")
    answer = Message.from_author_and_content(Author.new(Role.TOOL, "functions.get_weather"), result) \
        .with_channel("commentary").with_recipient("assistant")
    theirs = oracle(encoding, tools=True, history=[Message.from_role_and_content(Role.USER, ASK), call, answer])
    ours = render_chat_template(TEMPLATE, [{"role": "user", "content": ASK},
                                           {"role": "assistant", "content": "", "tool_calls": [ToolCall(
                                               "get_weather", ARGUMENTS).as_message_call()]},
                                           {"role": "tool", "content": result}], tools=[WEATHER_TOOL])
    assert ours == theirs.replace(f"<|message|>{result}<|end|>", f"<|message|>{json.dumps(result)}<|end|>")
    assert ours != theirs


@pytest.mark.parametrize("generated", [
    harmony.render_calls([ToolCall("get_weather", ARGUMENTS)]),
    "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
    "to=functions.get_weather <|constrain|>json<|message|>" + json.dumps(ARGUMENTS) + "<|call|>",
])
def test_calls_read_as_openai_harmony_parses_them(encoding, generated):
    from openai_harmony import Role
    ids = encoding.encode(generated, allowed_special="all")
    parsed = encoding.parse_messages_from_completion_tokens(ids, Role.ASSISTANT)
    theirs = [(m.recipient, json.loads(m.content[0].text)) for m in parsed if m.recipient]
    ours = [("functions." + c.name, c.arguments) for c in harmony.parse_calls(generated).calls]
    assert ours == theirs == [("functions.get_weather", ARGUMENTS)]


def test_channels_split_as_openai_harmony_parses_them(encoding):
    from openai_harmony import Role
    generated = ("<|channel|>analysis<|message|>17 + 25 = 42.<|end|><|start|>assistant<|channel|>final<|message|>"
                 "The answer is 42.<|return|>")
    parsed = encoding.parse_messages_from_completion_tokens(encoding.encode(generated, allowed_special="all"),
                                                            Role.ASSISTANT)
    theirs = {m.channel: m.content[0].text for m in parsed}
    assert harmony.split(generated) == {"reasoning": theirs["analysis"], "content": theirs["final"]}
