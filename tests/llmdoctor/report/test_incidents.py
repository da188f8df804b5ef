"""The published incidents (llmdoctor/report/incidents.py) as users find them: `llmdoctor explain "<symptom in
their words>"` names each, and docs/incidents.md lists each with its public report."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from llmdoctor.cli import cli
from llmdoctor.report import incidents

DOC = Path(__file__).parents[3] / "docs" / "incidents.md"


def section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split(f"## {title}")[1].split("\n## ")[0]


# ---- chat templates and the serving chain ----------------------------------------------------------
CHAT_SYMPTOMS = {
    "system prompt ignored": "system-message-dropped",
    "my second system message is dropped": "system-message-dropped",
    "tool call missing in stream": "tool-call-missing-in-stream",
    "finish_reason is tool_calls but tool_calls is an empty list": "tool-calls-finish-empty",
    "the next turn ends stop with no call": "tool-call-history-id",
    "ids like call00003 in the history": "tool-call-history-id",
    "arguments come back as {} although the model wrote a city": "tool-call-arguments-empty",
    "with enable_thinking false the content is null": "thinking-off-answer-in-reasoning",
    "zero-argument tool call is lost": "zero-argument-call-lost",
}


@pytest.mark.parametrize("symptom, incident", CHAT_SYMPTOMS.items())
def test_explain_finds_each_chat_incident_by_its_symptom(symptom, incident):
    result = CliRunner().invoke(cli, ["explain", symptom])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"[{incident}]"), result.output


def test_every_chat_incident_is_a_row_of_its_doc_section():
    rows = section("Chat templates and the serving chain")
    assert {s.id for s in incidents.CHAT} == set(CHAT_SYMPTOMS.values())
    for incident in incidents.CHAT:
        for reference in incident.references:
            assert reference in rows, (incident.id, reference)
        for command in incident.confirm_commands():
            assert command.split("--select ")[1].split(",")[0] in rows, (incident.id, command)
