"""`llmdoctor explain "<symptom>"` finds each published incident by the words users wrote, and docs/incidents.md lists
the same incidents with the same checks and reports (llmdoctor/report/incidents.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmdoctor.report.explain import explain
from llmdoctor.report.incidents import SERVING

DOC = (Path(__file__).resolve().parents[3] / "docs" / "incidents.md").read_text()

SERVING_SYMPTOMS = {
    "kv-cache-quantized": "after switching the KV cache to q4_0 the model answers AI AI AI",
    "batch-variant-greedy": "identical temperature=0 requests return different completions when concurrent",
    "speculative-changes-output": "speculative decoding diverges from non-speculative output at temperature 0",
    "prompt-cache-changes-logprobs": "prompt caching returns different logprobs for the same request warm vs cold",
}


@pytest.mark.parametrize("slug, symptom", SERVING_SYMPTOMS.items())
def test_serving_incidents_found_by_their_symptom(slug, symptom):
    text, code = explain(symptom)
    assert code == 0 and text.startswith(f"[{slug}]"), text


def test_serving_incidents_listed_in_the_doc():
    section = DOC.split("## Serving configurations that change answers", 1)[1]
    assert {s.id for s in SERVING} == set(SERVING_SYMPTOMS)
    for signature in SERVING:
        for reference in signature.references:
            assert reference in section, reference
        for check_id in signature.checks:
            assert f"`{check_id}`" in section, check_id
