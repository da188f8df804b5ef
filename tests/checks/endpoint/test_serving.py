"""EPT043-EPT045 on recorded answers: what a server that cannot be judged gets (a skip naming why, or the HTTP
error as a warning), never a crash. The live faults are in test_serving_live.py."""
from __future__ import annotations

import pytest

from checks.endpoint.serving.passage import PASSAGE
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests.probes.endpoint import cassette

pytestmark = [pytest.mark.assets]
IDS = ["EPT043", "EPT045"]


def serve(reference, exchanges):
    recording = {"exchanges": [{"method": "GET", "route": "/v1/models",
                                "response": {"object": "list", "data": [{"id": "m"}]}}, *exchanges]}
    return run_endpoint(reference.path, EndpointOptions("http://127.0.0.1:9/v1"), reference=reference,
                        transport=cassette.transport(recording), select=IDS)


def passage(response, status=200):
    return {"method": "POST", "route": "/v1/completions", "match": {"prompt": PASSAGE}, "status": status,
            "response": response}


def test_no_logprobs_no_drafts_are_skips_naming_why(smollm2_reference):
    plain = {"choices": [{"index": 0, "text": " it was cheap", "finish_reason": "length"}],
             "usage": {"prompt_tokens": 68, "completion_tokens": 4}}
    report = serve(smollm2_reference, [passage(plain)])
    runs = {r.id: r for r in report.checks}
    assert runs["EPT043"].status == "skipped" and "logprobs" in runs["EPT043"].reason
    assert runs["EPT045"].status == "skipped" and "draft_n" in runs["EPT045"].reason
    assert report.findings == []


def test_a_failing_server_is_a_warning_not_a_crash(smollm2_reference):
    report = serve(smollm2_reference, [passage({"error": {"message": "boom"}}, status=500)])
    assert not [r for r in report.checks if r.status == "crashed"]
    assert {(f.check, f.severity.value) for f in report.findings} == {("EPT043", "warning"), ("EPT045", "warning")}
    assert all("failed a probe request" in f.message for f in report.findings)
