"""The prober's own limits are not the server's faults: a request that outlasts --timeout (or the probe's deadline
or request count) makes the check skip naming the option to raise, or, after a finding, adds an info line beside
it; never a warning that the server failed. A request waits in proportion to the tokens it sends and asks for."""
from __future__ import annotations

import httpx
import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests import chain_assets, chain_faults
from tests.checks.endpoint.chain_fake import HealthyServer

pytestmark = pytest.mark.assets


@pytest.fixture(scope="module")
def tools_ref():
    return Reference.load(chain_assets.model_dir("tools"))


class SlowOnLongPrompts(HealthyServer):
    """Healthy, but no answer in time to a chat request longer than `chars` characters."""

    def __init__(self, ref, chars: int):
        super().__init__(ref)
        self.chars = chars

    def __call__(self, method, path, body):
        if body and sum(len(str(m.get("content") or "")) for m in body.get("messages") or []) > self.chars:
            raise httpx.ReadTimeout("the prober stopped waiting")
        return super().__call__(method, path, body)


def probe(ref, server, select, fault=None):
    return run_endpoint(ref.path, EndpointOptions("http://127.0.0.1:9/v1", timeout_s=7), reference=ref,
                        select=select, transport=chain_faults.fault_transport(fault, server))


def test_a_timeout_is_a_skip_naming_the_option(tools_ref):
    report = probe(tools_ref, SlowOnLongPrompts(tools_ref, 0), ["EPT083", "EPT084"])
    assert [f for f in report.findings if f.severity.value != "info"] == []
    runs = {r.id: (r.status, r.reason) for r in report.checks}
    for check in ("EPT083", "EPT084"):
        status, reason = runs[check]
        assert status == "skipped" and "no answer within 7 s" in reason and "raise --timeout" in reason, reason
        assert "not a fault of the server" in reason


def test_a_timeout_after_a_finding_keeps_it_with_an_info_line(tools_ref):
    """The 1k-token system probe is cut (an error); the 4k-token user probe then outlasts the timeout."""
    report = probe(tools_ref, SlowOnLongPrompts(tools_ref, 8000), ["EPT083"], fault="cut:system:start")
    levels = [(f.severity.value, f.message) for f in report.findings]
    assert [level for level, _ in levels] == ["error", "info"], levels
    assert "system message" in levels[0][1]
    assert "raise --timeout" in levels[-1][1] and "prober's limit" in levels[-1][1]
    assert report.findings[-1].evidence["limit"] == "--timeout"


def test_context_n_lengthens_the_probes_deadline():
    """--context 4096 sends about 2.5 x 4096 tokens in EPT122's prompts: the deadline grows by 3 --timeouts per 1024
    tokens of N, so the default 10 --timeouts are not spent before the long prompts are read."""
    from llmdoctor.run.endpoint_runner import deadline
    plain = EndpointOptions("http://127.0.0.1:9", timeout_s=60, deadline_s=600)
    assert deadline(plain) == 600
    assert deadline(EndpointOptions("http://127.0.0.1:9", timeout_s=60, deadline_s=600, context=4096)) == 600 + 720
