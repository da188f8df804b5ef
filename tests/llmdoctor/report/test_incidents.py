"""`llmdoctor explain "<symptom>"` finds each published incident by the words users wrote, and docs/incidents.md lists
the same incidents with the same checks and reports (llmdoctor/report/incidents.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmdoctor.report.explain import explain
from llmdoctor.report.incidents import CHAT

DOC = (Path(__file__).resolve().parents[3] / "docs" / "incidents.md").read_text()

CHAT_SYMPTOMS = {
    "system-message-dropped": ("system prompt ignored", "my second system message is dropped"),
    "tool-call-missing-in-stream": ("tool call missing in stream",),
    "tool-calls-finish-empty": ("finish_reason is tool_calls but tool_calls is an empty list",),
    "tool-call-history-id": ("the next turn ends stop with no call", "ids like call00003 in the history"),
    "tool-call-arguments-empty": ("arguments come back as {} although the model wrote a city",),
    "zero-argument-call-lost": ("zero-argument tool call is lost",),
    "thinking-off-answer-in-reasoning": ("with enable_thinking false the content is null",),
}


@pytest.mark.parametrize("slug, symptom", [(s, w) for s, words in CHAT_SYMPTOMS.items() for w in words])
def test_chat_incidents_found_by_their_symptom(slug, symptom):
    text, code = explain(symptom)
    assert code == 0 and text.startswith(f"[{slug}]"), text


def test_chat_incidents_listed_in_the_doc():
    section = DOC.split("## Chat templates and the serving chain", 1)[1].split("\n## ", 1)[0]
    assert {s.id for s in CHAT} == set(CHAT_SYMPTOMS)
    for signature in CHAT:
        for reference in signature.references:
            assert reference in section, reference
        for command in signature.confirm_commands():
            assert command.split("--select ")[1].split(",")[0] in section, command
