"""`llmdoctor baseline` + `llmdoctor check --baseline`: the CI gate passes an identical copy, fails a perturbed
one, never writes into the model directory, and refuses files it cannot trust."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from checks.shared.baseline_file import SCHEMA_VERSION, BaselineError, load
from llmdoctor.cli import cli
from tests.checks.zoo import LM_HEAD
from tests.checks.zoo_engine import perturb


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture(scope="module")
def recorded(factory_model_dir, tmp_path_factory):
    """(model dir, baseline path) recorded once through the CLI, with the model dir snapshot before it."""
    from tests.conftest import snapshot_dir
    model = factory_model_dir("qwen2")
    before = snapshot_dir(model)
    out = tmp_path_factory.mktemp("ci") / "golden.json"
    result = CliRunner().invoke(cli, ["baseline", str(model), "-o", str(out), "--quick"])
    assert result.exit_code == 0, result.output
    assert snapshot_dir(model) == before
    return model, out


def test_baseline_document(recorded):
    model, out = recorded
    doc = load(out)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["dtype"] == "float32" and doc["top_k"] == 20
    assert doc["fingerprint"].startswith("sha256:")
    chat = [p for p in doc["probes"] if p["chat"]]
    assert len(doc["probes"]) == 3 and len(chat) == 1          # two quick probes + the chat probe
    for probe in doc["probes"]:
        assert len(probe["top_k"]) == len(probe["ids"]) and len(probe["top_k"][0]["ids"]) == 20
        assert probe["greedy"] and isinstance(probe["greedy_text"], str)
    assert {row["module"] for row in doc["activations"]} == {"embed", "hidden", "attn", "mlp"}


def test_check_passes_an_identical_copy_and_fails_a_perturbed_one(recorded, runner, tmp_path):
    model, out = recorded
    same = shutil.copytree(model, tmp_path / "same")
    ok = runner.invoke(cli, ["check", str(same), "--select", "DRF", "--baseline", str(out), "--quick",
                             "--format", "json"])
    assert ok.exit_code == 0, ok.output
    assert {c["id"]: c["status"] for c in json.loads(ok.output)["checks"]} == dict.fromkeys(
        ("DRF001", "DRF002", "DRF003"), "passed")
    perturbed = shutil.copytree(model, tmp_path / "perturbed")
    perturb(LM_HEAD, 0.5)(perturbed)
    bad = runner.invoke(cli, ["check", str(perturbed), "--select", "DRF", "--baseline", str(out), "--quick",
                              "--format", "json"])
    assert bad.exit_code == 1
    (finding,) = [f for f in json.loads(bad.output)["findings"] if f["check"] == "DRF001"]
    assert finding["severity"] == "error" and "drifted" in finding["message"]


def test_refuses_to_write_inside_the_model_dir(recorded, runner, dir_snapshot):
    model, _ = recorded
    before = dir_snapshot(model)
    result = runner.invoke(cli, ["baseline", str(model), "-o", str(model / "golden.json")])
    assert result.exit_code == 2 and "inside the model directory" in result.output
    assert dir_snapshot(model) == before


def test_missing_baseline_file_is_exit_2(recorded, runner, tmp_path):
    result = runner.invoke(cli, ["check", str(recorded[0]), "--baseline", str(tmp_path / "nope.json")])
    assert result.exit_code == 2 and "baseline file not found" in result.output


@pytest.mark.parametrize("content, problem", [
    ("{not json", "invalid JSON"),
    (json.dumps({"hello": 1}), "not an llmdoctor baseline"),
    (json.dumps({"kind": "llmdoctor-baseline", "schema_version": 2}), "schema_version 2"),
    (json.dumps({"kind": "llmdoctor-baseline", "schema_version": 1, "probes": [{"ids": [1]}]}), "no valid probes"),
])
def test_load_rejects_untrustworthy_files(tmp_path, content, problem):
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=problem):
        load(path)


def test_unloadable_model_is_one_line_exit_2(runner, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{bad")
    result = runner.invoke(cli, ["baseline", str(model), "-o", str(tmp_path / "golden.json")])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "config.json: invalid JSON" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "golden.json").exists()
