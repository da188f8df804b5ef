"""The bounded client: URL forms, retries, budgets, errors as one line without the key."""
from __future__ import annotations

import httpx
import pytest

from probes.endpoint import Budget, EndpointClient, EndpointError, api_key_from_env, normalize_url


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1",
                                 "http://127.0.0.1:8000/v1/", "127.0.0.1:8000/v1"])
def test_root_or_v1(url):
    assert normalize_url(url) == "http://127.0.0.1:8000"


def client(handler, **budget):
    return EndpointClient("http://127.0.0.1:1/v1", api_key="sekret", budget=Budget(backoff_s=0.01, **budget),
                          transport=httpx.MockTransport(handler))


def test_retries_5xx_then_succeeds():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(503 if len(calls) < 3 else 200, json={"ok": len(calls)})
    assert client(handler).get("/v1/models") == {"ok": 3}


def test_http_error_message_without_the_key():
    def handler(request):
        return httpx.Response(401, json={"error": {"message": "bad key sekret"}})
    with pytest.raises(EndpointError) as e:
        client(handler).get("/v1/models")
    assert e.value.status == 401 and "HTTP 401" in str(e.value) and "sekret" not in str(e.value)


def test_budget_counts_requests():
    c = client(lambda r: httpx.Response(200, json={}), max_requests=2)
    c.get("/a")
    c.get("/b")
    with pytest.raises(EndpointError, match="budget exhausted"):
        c.get("/c")


def test_timeout_is_an_error_not_a_hang():
    def handler(request):
        raise httpx.ReadTimeout("slow", request=request)
    with pytest.raises(EndpointError, match="no answer within"):
        client(handler).get("/v1/models")


def test_non_json_body():
    with pytest.raises(EndpointError, match="not JSON"):
        client(lambda r: httpx.Response(200, text="<html>")).get("/v1/models")


def test_api_key_env(monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(EndpointError, match="NOPE_KEY is not set"):
        api_key_from_env("NOPE_KEY")
    assert api_key_from_env(None) is None


def test_a_request_waits_in_proportion_to_its_tokens():
    """--timeout covers 1024 tokens sent and asked for; a 4k-token prompt waits about four times as long."""
    waits = []

    def handler(request):
        waits.append(request.extensions["timeout"]["read"])
        return httpx.Response(200, json={})
    c = client(handler, timeout_s=10)
    c.get("/v1/models")
    c.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
    c.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 4096}], "max_tokens": 1})
    assert waits[:2] == [10, 10] and 40 <= waits[2] <= 80, waits


@pytest.mark.parametrize("budget, limit", [(dict(max_requests=1), "--max-requests"),
                                           (dict(deadline_s=0.1), "--timeout (the whole probe gets 10x it)")])
def test_the_probers_limits_are_named(budget, limit):
    c = client(lambda r: httpx.Response(200, json={}), **budget)
    with pytest.raises(EndpointError) as e:
        c.get("/a")
        c.get("/b")
    assert e.value.limit == limit and e.value.status is None


def test_a_timeout_names_the_option():
    def handler(request):
        raise httpx.ReadTimeout("slow", request=request)
    with pytest.raises(EndpointError) as e:
        client(handler).post("/v1/chat/completions", {"messages": []})
    assert e.value.limit == "--timeout"
