"""Replay recorded server answers through httpx.MockTransport (the EndpointClient's transport hook).

A recording (recordings/<server>.json) is {"server", "shapes_from", "exchanges": [{"method", "route", "match",
"status", "response"}]}: the first exchange whose method and route are the request's and whose `match` is a
subset of the request's JSON body answers it; anything else is answered 404 {"detail": "Not Found"}, as a
FastAPI/axum server answers a route it does not have.
"""
from __future__ import annotations

import json
from pathlib import Path

import httpx

RECORDINGS = Path(__file__).parent / "recordings"


def load(name: str) -> dict:
    return json.loads((RECORDINGS / f"{name}.json").read_text(encoding="utf-8"))


def transport(recording: dict, seen: list | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if seen is not None:
            seen.append({"method": request.method, "route": request.url.path, "body": body,
                         "authorization": request.headers.get("authorization")})
        for ex in recording["exchanges"]:
            same_route = ex["method"] == request.method and ex["route"] == request.url.path
            if same_route and _subset(ex.get("match", {}), body):
                return httpx.Response(ex.get("status", 200), json=ex["response"])
        return httpx.Response(404, json={"detail": "Not Found"})
    return httpx.MockTransport(handle)


def _subset(match: dict, body: dict) -> bool:
    return all(body.get(k) == v for k, v in match.items())
