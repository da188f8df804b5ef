"""EPT022/EPT041/EPT042 on answers built from the reference engine itself: an exact server is clean, a close
runner-up is drift, a far-down token is a bug, an answer that runs past the model's end token is named."""
from __future__ import annotations

import pytest
import torch

from checks.endpoint.inputs import COMPLETION_PROMPT, CONVERSATIONS, STOP_CONVERSATION
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests.probes.endpoint import cassette

pytestmark = [pytest.mark.assets, pytest.mark.slow]
STEPS = 12


@pytest.fixture(scope="module")
def reference(smollm2_reference):
    return smollm2_reference          # loaded once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def greedy(reference):
    """The reference's own greedy continuation of the completion prompt, with its top-5 logprobs."""
    engine, prompt = reference.engine(), reference.prompt_ids(COMPLETION_PROMPT)
    ids = []
    for _ in range(STEPS):
        ids.append(int(torch.argmax(engine.logits(prompt + ids)[-1])))
    rows = torch.log_softmax(engine.logits(prompt + ids).float(), -1)[len(prompt) - 1:-1]   # [STEPS, vocab]
    return prompt, ids, rows


def completion_body(reference, ids, rows, k=5):
    tops = []
    for row in rows:
        values, idx = torch.topk(row, k)
        tops.append({reference.piece(int(i)): float(v) for v, i in zip(values, idx)})
    return {"id": "cmpl-1", "object": "text_completion", "model": "m", "choices": [{
        "index": 0, "text": "".join(reference.piece(i) for i in ids), "finish_reason": "length",
        "logprobs": {"tokens": [reference.piece(i) for i in ids],
                     "token_logprobs": [float(r[i]) for r, i in zip(rows, ids)], "top_logprobs": tops,
                     "text_offset": list(range(len(ids)))}}],
        "usage": {"prompt_tokens": len(reference.prompt_ids(COMPLETION_PROMPT)), "completion_tokens": len(ids)}}


def serve(reference, exchanges, select):
    recording = {"exchanges": [{"method": "GET", "route": "/v1/models",
                                "response": {"object": "list", "data": [{"id": "m"}]}}, *exchanges]}
    return run_endpoint(reference.path, EndpointOptions("http://127.0.0.1:9/v1"), reference=reference,
                        transport=cassette.transport(recording), select=select)


def completion_exchange(body):
    return {"method": "POST", "route": "/v1/completions", "match": {"prompt": COMPLETION_PROMPT}, "response": body}


def severities(report, check_id):
    return [f.severity.value for f in report.findings_for(check_id)]


def test_exact_server_matches_token_for_token(reference, greedy):
    prompt, ids, rows = greedy
    report = serve(reference, [completion_exchange(completion_body(reference, ids, rows))], ["EPT041", "EPT042"])
    assert severities(report, "EPT041") == ["info"] and "token for token" in report.findings_for("EPT041")[0].message
    kl = report.findings_for("EPT042")[0]
    assert kl.severity.value == "info" and kl.evidence["mean_kl_topk"] < 1e-6 and kl.evidence["same_top1_rate"] == 1


def test_runner_up_is_drift_far_down_is_a_bug(reference, greedy):
    prompt, ids, rows = greedy
    engine = reference.engine()
    runner_up = int(torch.topk(rows[3], 2).indices[1])
    far = int(torch.argsort(rows[3], descending=True)[2000])
    for token, expected in ((runner_up, "drift"), (far, "bug")):
        changed = ids[:3] + [token]
        for _ in range(STEPS - 4):   # the server goes on greedily from its own token
            changed.append(int(torch.argmax(engine.logits(prompt + changed)[-1])))
        new_rows = torch.log_softmax(engine.logits(prompt + changed).float(), -1)[len(prompt) - 1:-1]
        report = serve(reference, [completion_exchange(completion_body(reference, changed, new_rows))], ["EPT041"])
        finding = report.findings_for("EPT041")[0]
        if expected == "drift":
            assert finding.severity.value in ("info", "warning") and finding.message.startswith("numeric drift")
            assert "first divergence at token 3" in finding.message
        else:
            assert finding.severity.value == "error" and "not this model's" in finding.message


def test_processed_logprobs_are_said_so(reference, greedy):
    prompt, ids, rows = greedy
    body = completion_body(reference, ids, rows)
    for top in body["choices"][0]["logprobs"]["top_logprobs"]:   # renormalised on the top-5, as after top-k
        total = torch.logsumexp(torch.tensor(list(top.values())), 0).item()
        for piece in top:
            top[piece] -= total
    report = serve(reference, [completion_exchange(body)], ["EPT042"])
    finding = report.findings_for("EPT042")[0]
    assert finding.evidence["processed_logprobs"] and "look processed" in finding.message
    assert finding.evidence["mean_kl_topk"] < 1e-6       # renormalised on the same set: still the same model


def test_answer_running_past_the_end_token(reference):
    engine, messages = reference.engine(), CONVERSATIONS[STOP_CONVERSATION]
    prompt, ids = reference.chat_ids(messages), []
    while len(ids) < 40:
        ids.append(int(torch.argmax(engine.logits(prompt + ids)[-1])))
        if ids[-1] in reference.eos_ids:
            break
    assert ids[-1] in reference.eos_ids, "the reference answers briefly and ends its turn"
    # a server that does not stop: the end token is printed as "" (a control token) and the text runs on
    tokens = [{"token": reference.piece(i) if i not in reference.eos_ids else "", "logprob": -0.1, "top_logprobs": []}
              for i in ids] + [{"token": "\n", "logprob": -0.1, "top_logprobs": []}] * 5
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris.\nuser\nWhat"},
                         "finish_reason": "length", "logprobs": {"content": tokens}}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(tokens)}}
    report = serve(reference, [{"method": "POST", "route": "/v1/chat/completions", "match": {"messages": messages},
                                "response": body}], ["EPT022"])
    finding = report.findings_for("EPT022")[0]
    assert finding.severity.value == "error" and f"after {len(ids) - 1} tokens" in finding.message
    assert "user\n" in finding.evidence["leaked_markers"]
