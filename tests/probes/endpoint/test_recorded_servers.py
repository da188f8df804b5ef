"""The vLLM, llama.cpp, TGI and Ollama adapters against recorded answers (recordings/*.json, shapes from each
server's documented API), through the same run as a live server: detection, the adapter, the EPT finding."""
from __future__ import annotations

import json
import shutil

import pytest

from checks.endpoint.reference import Reference
from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
from probes.endpoint import EndpointClient, connect
from tests.probes.endpoint import cassette

pytestmark = pytest.mark.assets


@pytest.fixture(scope="module")
def reference(smollm2_reference):
    return smollm2_reference          # loaded once per session (tests/conftest.py)


def run(reference, name, seen=None, select=None, **kw):
    transport = cassette.transport(cassette.load(name), seen)
    return run_endpoint(reference.path, EndpointOptions("http://127.0.0.1:8000/v1", **kw), reference=reference,
                        transport=transport, select=select, ignore=["EPT04", "EPT022"])   # no engine needed here


def errors(report, levels=("error",)):
    return sorted({f.check for f in report.findings if f.severity.value in levels})


@pytest.mark.parametrize("name, kind", [("vllm", "vllm"), ("llamacpp", "llama.cpp"), ("tgi", "tgi"),
                                        ("ollama", "ollama")])
def test_detection_picks_the_adapter(name, kind):
    client = EndpointClient("http://127.0.0.1:8000", transport=cassette.transport(cassette.load(name)))
    assert connect(client).surface.kind == kind


def test_vllm_double_bos_from_tokenize_messages(reference):
    report = run(reference, "vllm")
    assert errors(report) == ["EPT011"]
    messages = [f.message.split(":")[0] for f in report.findings_for("EPT011")]
    assert messages == ["double BOS on the server's chat prompt"]
    window = report.findings_for("EPT051")[0]
    assert window.severity.value == "info" and window.evidence["server_max_context"] == 8192


def test_llamacpp_apply_template_diff_and_props_defaults(reference, smollm2_dir, tmp_path):
    report = run(reference, "llamacpp")
    drift = report.findings_for("EPT012")[0]
    assert drift.severity.value == "error" and len(drift.evidence["diffs"]) == 2   # the two without a system turn
    assert any("-<|im_start|>system" in line for line in drift.evidence["diffs"][0]["diff"])
    assert report.findings_for("EPT051")[0].evidence["server_max_context"] == 4096
    # a model whose generation_config sets temperature/top_p: the server's /props defaults override them
    model = tmp_path / "model"
    shutil.copytree(smollm2_dir, model, ignore=shutil.ignore_patterns("*.safetensors"))
    gen = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**gen, "temperature": 0.6, "top_p": 0.9}))
    overridden = run(Reference.load(model), "llamacpp", select=["EPT031"])
    finding = overridden.findings_for("EPT031")[0]
    assert finding.severity.value == "warning" and "temperature 0.8 (model 0.6)" in finding.message


def test_tgi_special_tokens_split_and_long_window(reference):
    report = run(reference, "tgi")
    assert "EPT014" in errors(report)
    assert "<|im_start|>" in report.findings_for("EPT014")[0].message
    window = report.findings_for("EPT051")[0]
    assert window.severity.value == "warning" and "past the model's trained context of 8192" in window.message


def test_ollama_stop_set_and_rope(reference):
    seen = []
    report = run(reference, "ollama", seen)
    assert "EPT021" in errors(report)
    assert "holds none of the model's end tokens" in report.findings_for("EPT021")[0].message
    assert any("rope base 10000" in f.message for f in report.findings_for("EPT051"))
    assert report.findings_for("EPT031")[0].evidence["server"]["temperature"] == 0.2
    # no tokenize route: prompt ids compared through prompt_eval_count of raw /api/generate requests
    assert any(r["route"] == "/api/generate" and r["body"].get("raw") for r in seen)
    assert report.findings_for("EPT013") == []


def test_api_key_header_sent_and_never_reported(reference, monkeypatch):
    monkeypatch.setenv("LLMDOCTOR_KEY", "tok-abc-123")
    seen = []
    report = run(reference, "vllm", seen, api_key_env="LLMDOCTOR_KEY")
    assert seen and all(r["authorization"] == "Bearer tok-abc-123" for r in seen)
    assert "tok-abc-123" not in json.dumps([f.as_dict() for f in report.findings])
