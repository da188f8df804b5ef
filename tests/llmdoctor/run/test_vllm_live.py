"""`llmdoctor probe endpoint` against a REAL vLLM (the session's, tests/vllm_server.py)."""
from __future__ import annotations

import httpx
import pytest

pytestmark = [pytest.mark.assets, pytest.mark.slow]


def test_vllm_answers(vllm_server):
    r = httpx.get(f"{vllm_server.url}/v1/models", timeout=30).json()
    assert r["data"]
