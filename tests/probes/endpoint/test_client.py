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
