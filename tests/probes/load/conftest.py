"""What the load tests against the fake server share: the reference model directory and the fake server."""
from __future__ import annotations

import pytest

from reference_engine.testing.factory import build_model_dir
from tests.load_servers import FakeServer


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("ref")
    build_model_dir(d, "llama")
    return d


@pytest.fixture(scope="module")
def fake():
    with FakeServer(slots=4, token_s=0.002) as server:
        yield server
