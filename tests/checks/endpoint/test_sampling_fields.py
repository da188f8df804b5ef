"""EPT032 against a fake vLLM that fills the sampling fields a request leaves out either with neutral values (as
the OpenAI API defines them) or from the model's generation_config.json (vLLM's --generation-config auto), and one
whose samples change under the same seed. The live twin: tests/llmdoctor/run/test_vllm_live.py."""
from __future__ import annotations

import itertools

import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from tests import chain_faults
from tests.vllm_server import SAMPLING_CONFIG, sampling_config_dir

pytestmark = pytest.mark.assets
NEUTRAL = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


class FakeVllm:
    def __init__(self, defaults: dict, reproducible: bool = True):
        self.defaults, self.reproducible, self.draws = defaults, reproducible, itertools.count()

    def __call__(self, method: str, path: str, body: dict | None):
        if path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "fake", "object": "model"}]}
        if path == "/tokenize":
            return 200, {"count": 1, "max_model_len": 4096, "tokens": [1]}
        if path != "/v1/chat/completions":
            return 404, {"error": {"message": "not found"}}
        used = {k: body.get(k, self.defaults.get(k, v)) for k, v in NEUTRAL.items()}
        draw = "" if self.reproducible or not body.get("temperature") else f" draw {next(self.draws)}"
        text = f"t={body.get('temperature')} seed={body.get('seed')} {sorted(used.items())}{draw}"
        return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "length"}], "usage": {"prompt_tokens": 5, "completion_tokens": 16}}


@pytest.fixture(scope="module")
def configured_ref():
    return Reference.load(sampling_config_dir())


def probe(ref, server):
    return run_endpoint(ref.path, EndpointOptions("http://127.0.0.1:9/v1"), reference=ref, select=["EPT032"],
                        transport=chain_faults.fault_transport(None, server))


def test_fields_filled_from_generation_config_are_named(configured_ref):
    report = probe(configured_ref, FakeVllm(SAMPLING_CONFIG))
    (finding,) = report.findings
    assert finding.severity.value == "warning" and "did not honour" in finding.message
    assert "top_k 3" in finding.message and "repetition_penalty 1.3" in finding.message
    assert "at temperature 0 and 1" in finding.message and "--generation-config vllm" in finding.hint
    assert finding.location.file.endswith("generation_config.json")


def test_neutral_defaults_are_quiet(configured_ref):
    report = probe(configured_ref, FakeVllm({}))
    assert [f.severity.value for f in report.findings] == ["info"]


def test_a_servers_own_defaults_are_information_when_the_model_sets_none(smollm2_dir):
    """llama.cpp-like defaults (top_k 40 ...) where generation_config.json sets no sampling field: EPT031's
    business where published, a note here."""
    report = probe(Reference.load(smollm2_dir), FakeVllm({"top_k": 40, "top_p": 0.95}))
    (finding,) = report.findings
    assert finding.severity.value == "info" and "server's own defaults" in finding.message


def test_samples_that_change_under_one_seed_skip(configured_ref):
    report = probe(configured_ref, FakeVllm(SAMPLING_CONFIG, reproducible=False))
    (run,) = report.checks
    assert run.status == "skipped" and "not reproducible under a seed" in run.reason
