"""One streamed chat request, timed chunk by chunk (Server-Sent Events over httpx).

TTFT is the first chunk carrying text; every later text chunk is an inter-token gap. The stream must end with a
finish_reason: one that closes (even with `data: [DONE]`) without it is a dropped stream, which is what a server
does when it aborts a request under load (llama-cpp-python's interrupt_requests). Every wait is bounded by the
request timeout and by the run's deadline; a request still open at the deadline is closed and marked CUT.
"""
from __future__ import annotations

import json
import time

import httpx

from probes.load.types import CANCELLED, CUT, DROPPED, HTTP_ERROR, OK, TIMEOUT, TRANSPORT, Sample


ROUTE = "/v1/chat/completions"


def chat_body(model: str | None, prompt: str, max_tokens: int, extra: dict) -> dict:
    """A streamed greedy chat request: what production traffic to an instruct model looks like (a raw completion
    prompt lets an instruct model end its turn at once)."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True}, **extra}
    if model:
        body["model"] = model
    return body


def stream_request(http: httpx.Client, body: dict, sample: Sample, *, timeout_s: float, deadline: float,
                   cancel_after: int | None = None) -> Sample:
    """POST /v1/chat/completions with stream=true and fill `sample`; never raises for anything the server does.

    cancel_after: close the stream after that many text chunks (a client that walks away)."""
    sent = time.monotonic()
    limit = min(sent + timeout_s, deadline)
    if limit - sent <= 0.05:
        sample.outcome, sample.error = CUT, "no time left"
        return sample
    timeout = httpx.Timeout(limit - sent, connect=min(5.0, limit - sent))
    try:
        with http.stream("POST", ROUTE, json=body, timeout=timeout) as response:
            sample.status = response.status_code
            if response.status_code >= 400:
                response.read()
                sample.outcome = HTTP_ERROR
                sample.error = f"HTTP {response.status_code}: {' '.join(response.text.split())[:200]}"
                return _done(sample, sent)
            _read_events(response, sample, sent, limit, deadline, cancel_after)
    except httpx.TimeoutException:
        sample.outcome = CUT if time.monotonic() >= deadline - 0.05 else TIMEOUT
        sample.error = f"no answer within {limit - sent:.1f} s" if sample.outcome == TIMEOUT else "time limit"
    except httpx.HTTPError as e:  # connection refused or reset, a broken chunked body, ...
        sample.outcome, sample.error = (DROPPED if sample.chunk_times else TRANSPORT), f"{type(e).__name__}: {e}"
    return _done(sample, sent)


def _read_events(response: httpx.Response, sample: Sample, sent: float, limit: float, deadline: float,
                 cancel_after: int | None) -> None:
    usage_tokens = None
    for line in response.iter_lines():
        now = time.monotonic()
        if now > limit:
            sample.outcome = CUT if now >= deadline else TIMEOUT
            sample.error = "time limit" if sample.outcome == CUT else f"stream still open after {limit - sent:.1f} s"
            return
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("error"):
            sample.outcome, sample.error = HTTP_ERROR, f"error event: {str(event['error'])[:200]}"
            return
        usage = event.get("usage") if isinstance(event, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            usage_tokens = usage["completion_tokens"]
        text, finish = _choice(event)
        if text:
            if sample.ttft_s is None:
                sample.ttft_s = now - sent
            sample.chunk_times.append(now - sent)
            sample.text += text
        if finish:
            sample.finish_reason = finish
        if cancel_after is not None and len(sample.chunk_times) >= cancel_after and not finish:
            sample.outcome = CANCELLED
            return
    sample.output_tokens = usage_tokens if usage_tokens else len(sample.chunk_times)
    if sample.finish_reason is None:
        sample.outcome, sample.error = DROPPED, "the stream ended without a finish_reason"


def _choice(event) -> tuple[str, str | None]:
    choices = event.get("choices") if isinstance(event, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", None
    choice = choices[0]
    text = choice.get("text")
    if text is None and isinstance(choice.get("delta"), dict):
        text = choice["delta"].get("content")
    return (text if isinstance(text, str) else ""), choice.get("finish_reason")


def _done(sample: Sample, sent: float) -> Sample:
    sample.e2e_s = time.monotonic() - sent
    if sample.outcome != OK and not sample.output_tokens:
        sample.output_tokens = len(sample.chunk_times)
    return sample
