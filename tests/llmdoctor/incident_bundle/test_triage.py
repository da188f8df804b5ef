"""`llmdoctor triage`: a complete bundle, nothing written into the model directory, secrets not copied."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llmdoctor.run.output_guard import InsideModelError
from llmdoctor.incident_bundle.bundle import BUNDLE_FILES, run_triage
from probes.environment import environment_problems, relevant_env
from tests.probes import nvml_records as rec


@pytest.fixture
def tiny_model_dir(factory_model_dir):
    return factory_model_dir("llama")


def test_bundle_has_every_file_and_the_model_dir_is_untouched(tmp_path, tiny_model_dir, dir_snapshot):
    before = dir_snapshot(tiny_model_dir)
    result = run_triage(tiny_model_dir, tmp_path / "bundle", kv_requests=300, bandwidth_bytes=4 * 2**20,
                        nvml_backend=rec.no_library())
    assert dir_snapshot(tiny_model_dir) == before
    assert sorted(p.name for p in (tmp_path / "bundle").iterdir()) == sorted(BUNDLE_FILES)
    report = json.loads((tmp_path / "bundle" / "report.json").read_text())
    ids = {f["check"] for f in report["findings"]}
    assert {"ENV101", "GPU101", "GPU102", "GPU103", "KVC901", "KVC902"} <= ids
    assert any(run["id"][:3] in ("FIL", "CFG", "WGT") for run in report["checks"])  # the quick checks ran
    assert report["fingerprint"] and report["fingerprint"].startswith("sha256:")
    gpu101 = next(f for f in report["findings"] if f["check"] == "GPU101")
    assert gpu101["message"].startswith("skipped: NVML not available (NVML Shared Library Not Found")
    env = json.loads((tmp_path / "bundle" / "environment.json").read_text())
    assert env["torch"]["version"] and "torch" in env["packages"] and env["memory"]["MemTotal"] > 0
    assert "# " in (tmp_path / "bundle" / "report.md").read_text()
    assert "<svg" in (tmp_path / "bundle" / "report.html").read_text()
    assert result.report.findings


def test_bundle_inside_the_model_dir_is_refused(tiny_model_dir, dir_snapshot):
    before = dir_snapshot(tiny_model_dir)
    with pytest.raises(InsideModelError, match="triage bundle inside the model directory"):
        run_triage(tiny_model_dir, tiny_model_dir / "bundle", nvml_backend=rec.no_library())
    assert dir_snapshot(tiny_model_dir) == before


def test_triage_without_a_model(tmp_path):
    result = run_triage(None, tmp_path / "b", kv_requests=200, bandwidth_bytes=2**20, nvml_backend=rec.no_device())
    runs = {r.id: r for r in result.report.checks}
    assert runs["GPU103"].status == "skipped" and "no model directory" in runs["GPU103"].reason
    assert "NVML found no GPU" in next(f.message for f in result.report.findings if f.check == "GPU101")


def test_secrets_are_not_copied():
    env = relevant_env({"HF_TOKEN": "hf_abc", "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root", "VLLM_API_KEY": "k"})
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "<set>", "VLLM_API_KEY": "<set>"}


def test_environment_problems_name_the_mismatch():
    env = {"torch": {"cuda_available": False, "cuda_build": None, "devices": []},
           "nvml": {"gpus": [{}], "system": {"cuda_driver_version": 12040}}}
    assert environment_problems(env) == ["NVML sees 1 GPU(s) but torch cannot use them (a CPU-only torch build)"]
    env = {"torch": {"cuda_available": True, "cuda_build": "12.8", "arch_list": ["sm_80", "sm_90"],
                     "devices": [{"name": "Tesla T4", "capability": "7.5"}]},
           "nvml": {"gpus": [{}], "system": {"cuda_driver_version": 12040}}}
    assert environment_problems(env) == [
        "driver supports CUDA 12.4 but torch was built for CUDA 12.8",
        "Tesla T4 is sm_75, not in this torch build's arch list ['sm_80', 'sm_90']"]


def test_cli_triage_prints_where(tmp_path, tiny_model_dir):
    from llmdoctor.commands.triage import triage
    result = CliRunner().invoke(triage, [str(tiny_model_dir), "-o", str(tmp_path / "out"), "--kv-requests", "200",
                                         "--no-checks"])
    assert result.exit_code == 0, result.output
    assert "llmdoctor: triage:" in result.output and str(tmp_path / "out" / "report.html") in result.output
