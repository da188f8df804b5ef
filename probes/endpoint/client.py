"""A bounded, polite HTTP client for one inference server (httpx underneath).

Every request counts against a budget (number of requests and a wall-clock deadline) so a probe of a slow or
wedged server ends in bounded time. Connection errors, 429 and 5xx are retried a few times with a short backoff
(Retry-After honoured up to a cap); everything else comes back as it is. A request that cannot be answered raises
EndpointError whose message carries the HTTP status or the transport error, never the API key.

A request's timeout grows with what it asks of the server: `timeout_s` covers TOKENS_PER_TIMEOUT tokens (the
prompt's, estimated from the body's characters, plus the tokens it asks for), a 4096-token prompt gets four times
that. Running out of one of the prober's own limits (a request's timeout, the run's deadline, its request count)
is an EndpointError whose `limit` names the option that raises it: the prober gave up, the server did nothing
wrong that it can tell.

The URL may be the server root (http://host:8000) or the OpenAI base (http://host:8000/v1); routes are given
from the root ("/v1/models", "/tokenize").
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

import httpx

RETRY_STATUSES = (429, 500, 502, 503, 504)
TOKENS_PER_TIMEOUT = 1024       # tokens (sent and asked for) one --timeout covers; a longer request waits longer
CHARS_PER_TOKEN = 3             # a body's characters per prompt token, low (JSON quoting, punctuation): waits long
TIMEOUT, DEADLINE, REQUESTS = "--timeout", "--timeout (the whole probe gets 10x it)", "--max-requests"


class EndpointError(Exception):
    """The server could not be asked: transport error, timeout, exhausted budget or an HTTP error status.
    `limit`: the prober's option that ran out (TIMEOUT, DEADLINE, REQUESTS), "" when the server answered wrong."""

    def __init__(self, message: str, status: int | None = None, route: str = "", limit: str = ""):
        super().__init__(message)
        self.status = status
        self.route = route
        self.limit = limit


# every EPT check of one `probe endpoint` run, chain and serving checks included, fits (vLLM's healthy run asks ~100)
MAX_REQUESTS = 160


@dataclass
class Budget:
    max_requests: int = MAX_REQUESTS  # requests in one probe run (retries included)
    deadline_s: float = 600.0       # wall clock for the whole run
    timeout_s: float = 60.0         # one request
    retries: int = 2                # extra tries on connect errors, 429 and 5xx
    backoff_s: float = 0.5          # first wait; doubles each retry
    used: int = 0
    started: float = field(default_factory=time.monotonic)

    def left_s(self) -> float:
        return self.deadline_s - (time.monotonic() - self.started)

    def take(self, route: str, tokens: int = 0) -> float:
        """Count one request of about `tokens` tokens (sent and asked for); the timeout it may use, timeout_s per
        TOKENS_PER_TIMEOUT of them. Raises EndpointError when the budget is spent."""
        if self.used >= self.max_requests:
            raise EndpointError(f"request budget exhausted ({self.max_requests} requests)", route=route,
                                limit=REQUESTS)
        left = self.left_s()
        if left <= 0.5:
            raise EndpointError(f"time budget exhausted ({self.deadline_s:.0f} s)", route=route, limit=DEADLINE)
        self.used += 1
        return min(self.timeout_s * max(1.0, tokens / TOKENS_PER_TIMEOUT), left)


def request_tokens(body: dict | None) -> int:
    """About how many tokens a request body sends and asks for: its characters over CHARS_PER_TOKEN (an
    overestimate of the prompt: the timeout errs long) plus max_tokens (n_predict, max_new_tokens)."""
    if not body:
        return 0
    asked = next((v for k in ("max_tokens", "n_predict", "max_new_tokens") if isinstance(v := body.get(k), int)), 0)
    return len(json.dumps(body, default=str)) // CHARS_PER_TOKEN + max(asked, 0)


def normalize_url(url: str) -> str:
    """The server root: scheme and host, no trailing slash and no /v1 (the OpenAI base is root + /v1)."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    return url.rstrip("/")


def api_key_from_env(var: str | None) -> str | None:
    """The API key held in environment variable `var` (None when no variable is named)."""
    if not var:
        return None
    value = os.environ.get(var)
    if not value:
        raise EndpointError(f"environment variable {var} is not set or empty (it should hold the API key)")
    return value


class EndpointClient:
    def __init__(self, url: str, api_key: str | None = None, budget: Budget | None = None,
                 transport: httpx.BaseTransport | None = None):
        self.root = normalize_url(url)
        self.budget = budget or Budget()
        self._secret = api_key
        headers = {"User-Agent": "llmdoctor-endpoint-probe"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(base_url=self.root, headers=headers, transport=transport,
                                  follow_redirects=False, trust_env=False)
        self.log: list[dict] = []      # route, status, seconds of every request (no bodies, no headers)

    def close(self) -> None:
        self._http.close()

    def get(self, route: str) -> dict | list:
        return self.request("GET", route)

    def post(self, route: str, body: dict) -> dict | list:
        return self.request("POST", route, body)

    def request(self, method: str, route: str, body: dict | None = None) -> dict | list:
        """The JSON answer of one request (retried politely); EndpointError otherwise."""
        wait = self.budget.backoff_s
        for attempt in range(self.budget.retries + 1):
            timeout = self.budget.take(route, request_tokens(body))
            started = time.monotonic()
            try:
                response = self._http.request(method, route, json=body, timeout=timeout)
            except httpx.TimeoutException:
                self._record(route, "timeout", started)
                raise timed_out(f"{method} {route}", timeout, route) from None
            except httpx.HTTPError as e:
                self._record(route, "error", started)
                if attempt < self.budget.retries and isinstance(e, httpx.TransportError):
                    time.sleep(min(wait, max(self.budget.left_s(), 0)))
                    wait *= 2
                    continue
                raise EndpointError(self._scrub(f"{method} {route}: {type(e).__name__}: {e}"), route=route) from None
            self._record(route, response.status_code, started)
            if response.status_code in RETRY_STATUSES and attempt < self.budget.retries:
                time.sleep(min(self._retry_after(response, wait), max(self.budget.left_s(), 0)))
                wait *= 2
                continue
            return self._json(method, route, response)
        raise AssertionError("unreachable")

    def stream(self, route: str, body: dict) -> list[dict]:
        """The JSON events of one streamed POST (server-sent events, `data: {...}` lines up to `data: [DONE]`),
        counted against the budget like any request; not retried (a half-read stream cannot be replayed)."""
        timeout = self.budget.take(route, request_tokens(body))
        started = time.monotonic()
        events: list[dict] = []
        try:
            with self._http.stream("POST", route, json=body, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    self._record(route, response.status_code, started)
                    return [self._json("POST", route, response)]        # raises EndpointError
                for line in response.iter_lines():
                    payload = line[5:].strip() if line.startswith("data:") else ""
                    if payload == "[DONE]":
                        break
                    try:
                        event = json.loads(payload) if payload else None
                    except ValueError:
                        continue
                    if isinstance(event, dict):
                        events.append(event)
        except httpx.TimeoutException:
            self._record(route, "timeout", started)
            raise timed_out(f"POST {route} (stream)", timeout, route) from None
        except httpx.HTTPError as e:
            self._record(route, "error", started)
            raise EndpointError(self._scrub(f"POST {route} (stream): {type(e).__name__}: {e}"), route=route) from None
        self._record(route, 200, started)
        return events

    def _json(self, method: str, route: str, response: httpx.Response) -> dict | list:
        if response.status_code >= 400:
            raise EndpointError(self._scrub(f"{method} {route}: HTTP {response.status_code}: "
                                            f"{error_text(response)}"), status=response.status_code, route=route)
        try:
            return response.json()
        except ValueError:
            raise EndpointError(f"{method} {route}: HTTP {response.status_code} but the body is not JSON: "
                                f"{response.text[:120]!r}", status=response.status_code, route=route) from None

    def _retry_after(self, response: httpx.Response, default: float) -> float:
        try:
            return min(float(response.headers.get("retry-after", default)), 5.0)
        except ValueError:
            return default

    def _record(self, route: str, status, started: float) -> None:
        self.log.append({"route": route, "status": status, "seconds": round(time.monotonic() - started, 3)})

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def timed_out(what: str, timeout: float, route: str) -> EndpointError:
    return EndpointError(f"{what}: no answer within {timeout:.0f} s", route=route, limit=TIMEOUT)


def error_text(response: httpx.Response) -> str:
    """The server's error message, one line: OpenAI {"error": {"message"}}, FastAPI {"detail"}, or the body."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300] or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return " ".join(str(err).split())[:300]
    return " ".join(str(body).split())[:300]
