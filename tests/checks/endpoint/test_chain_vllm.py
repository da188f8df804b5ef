"""EPT071 on a server that enforces a tool's argument schema only for tools marked "strict" (vLLM: its
--tool-strict-level "auto" reads each tool's `strict`; the probe's tools are not strict): arguments that break the
schema are the small model's words, a warning naming the switch and located at the request, not at a model file.
The same answer from a server not known to skip schemas stays an error (tests/checks/endpoint/test_chain.py).
A fake vLLM: the chain fake (chain_fake.py) that also answers vLLM's POST /tokenize, so detection says "vllm"."""
from __future__ import annotations

import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests import chain_assets, chain_faults
from tests.checks.endpoint.chain_fake import HealthyServer

pytestmark = pytest.mark.assets


class VllmLike(HealthyServer):
    def __call__(self, method: str, path: str, body: dict | None):
        if path == "/tokenize":
            ids = self.ref.tokenizer.encode((body or {}).get("prompt", ""), add_special_tokens=False)
            return 200, {"count": len(ids), "max_model_len": 4096, "tokens": ids}
        return super().__call__(method, path, body)


@pytest.fixture(scope="module")
def tools_ref():
    return Reference.load(chain_assets.model_dir("tools"))


def probe(ref, fault):
    return run_endpoint(ref.path, EndpointOptions("http://127.0.0.1:9/v1"), reference=ref,
                        select=["EPT001", "EPT071"], transport=chain_faults.fault_transport(fault, VllmLike(ref)))


def test_schema_break_of_a_tool_not_marked_strict_is_a_warning_naming_strict(tools_ref):
    report = probe(tools_ref, "args-schema")
    assert report.findings_for("EPT001")[0].evidence["server"] == "vllm"
    warnings = [f for f in report.findings_for("EPT071") if f.severity.value == "warning"]
    assert warnings and not [f for f in report.findings if f.severity.value == "error"]
    for finding in warnings:
        assert "'kelvin' is not one of" in finding.message and 'not marked "strict"' in finding.message
        assert '"strict": true' in finding.hint and "--tool-strict-level parameter" in finding.hint
        assert finding.location.file is None and finding.location.logical == "request.tools[].function.strict"


@pytest.mark.parametrize("fault", ["args-not-json", "args-double"])
def test_what_no_schema_switch_explains_stays_an_error(tools_ref, fault):
    """Arguments cut mid-object or encoded twice are the parser's or the server's doing, strict or not."""
    report = probe(tools_ref, fault)
    assert "error" in {f.severity.value for f in report.findings_for("EPT071")}


def test_healthy_answers_carry_no_failure_hint(tools_ref):
    """The info lines of a server that answered (EPT001) and delivered calls (EPT071) give no fix to apply."""
    report = probe(tools_ref, None)
    assert [f.severity.value for f in report.findings] == ["info", "info"]
    assert all(f.hint == "" for f in report.findings)
