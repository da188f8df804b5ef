"""The published 2025-2026 incidents where a model loaded and a server answered 200 while the answers were wrong,
findable by the symptom users wrote ("repeats the question", "tool call missing in stream").

Each entry is a `Signature` whose patterns are the symptom in users' words, whose checks are the ids that catch it
and whose references are the public reports (tracker#number). docs/incidents.md lists the same incidents with the
command that shows each; `tests/llmdoctor/report/test_incidents.py` keeps the two in step.
"""
from __future__ import annotations

from llmdoctor.report.signature_types import Signature

# ---- files and conversion --------------------------------------------------------------------------
FILES: tuple[Signature, ...] = (
)


# ---- chat templates and the serving chain ----------------------------------------------------------
CHAT: tuple[Signature, ...] = (
)


# ---- serving configurations that change answers ----------------------------------------------------
SERVING: tuple[Signature, ...] = (
)


INCIDENTS: tuple[Signature, ...] = FILES + CHAT + SERVING
