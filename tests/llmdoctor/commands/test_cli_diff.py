"""`llmdoctor diff REF CAND` through click's CliRunner: exit codes, --fail-on, formats (the per-layer plot in
HTML and Markdown), bad input as one line with exit 2, never writing into either model."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema

import pytest
import torch
from click.testing import CliRunner

from llmdoctor.cli import cli
from tests.checks.zoo import edit_tensors

FAST = ["--quick", "--select", "DIF020,DIF030,DIF040"]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def pair(factory_model_dir, tmp_path_factory):
    ref = factory_model_dir("llama", num_hidden_layers=3)
    root = tmp_path_factory.mktemp("cli-diff")
    same = root / "same"
    shutil.copytree(ref, same)
    changed = root / "changed"
    shutil.copytree(ref, changed)
    name = "model.layers.1.self_attn.v_proj.weight"

    def perturb(t, d):
        t[name] = t[name] + 0.5 * t[name].std() * torch.randn(t[name].shape, generator=torch.Generator().manual_seed(1))
    edit_tensors(perturb)(changed)
    return ref, same, changed


def test_identical_pair_exits_zero_with_json_report(pair):
    ref, same, _ = pair
    result = invoke("diff", ref, same, *FAST, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{"):])
    assert {c["id"] for c in doc["checks"]} == {"DIF020", "DIF030", "DIF040"}
    assert all(f["severity"] == "info" and f["category"] == "diff" for f in doc["findings"])
    schema = json.loads((Path(__file__).parents[3] / "docs" / "report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)        # the same report contract as `check`


def test_fail_on_warning_exits_one_when_a_layer_is_named(pair):
    ref, _, changed = pair
    assert invoke("diff", ref, changed, *FAST).exit_code == 0           # default --fail-on error
    result = invoke("diff", ref, changed, *FAST, "--fail-on", "warning")
    assert result.exit_code == 1
    assert "layer 1 attn" in result.output


def test_html_and_markdown_carry_the_per_layer_plot(pair, tmp_path):
    ref, _, changed = pair
    html = tmp_path / "diff.html"
    assert invoke("diff", ref, changed, *FAST, "--format", "html", "-o", html).exit_code == 0
    text = html.read_text(encoding="utf-8")
    assert "<svg" in text and "Where the models part ways" in text
    md = invoke("diff", ref, changed, *FAST, "--format", "markdown").output
    assert "| layer | residual stream (accumulated) | attention (own error) | MLP (own error) |" in md


def test_bad_inputs_are_one_line_exit_two(pair, tmp_path):
    ref, same, _ = pair
    for args in (("diff", ref, tmp_path / "missing"), ("diff", tmp_path / "golden.json", ref),
                 ("diff", ref, same, "-o", same / "report.txt")):
        if args[1] == tmp_path / "golden.json":
            (tmp_path / "golden.json").write_text("{}", encoding="utf-8")
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 2, (args, result.output)
        assert result.output.strip().startswith("llmdoctor: error:") and len(result.output.strip().splitlines()) == 1
    assert not (same / "report.txt").exists()


def test_catalogue_and_explain_know_the_dif_family():
    listed = invoke("checks", "--select", "DIF", "--format", "json")
    ids = [row["id"] for row in json.loads(listed.output)]
    assert ids[:3] == ["DIF001", "DIF002", "DIF003"] and "DIF040" in ids and "DIF050" in ids
    explained = invoke("explain", "DIF040")
    assert explained.exit_code == 0 and "isolated" in explained.output.lower()


def test_python_api_is_the_same_runner(pair):
    import llmdoctor
    ref, same, _ = pair
    report = llmdoctor.diff(ref, same, quick=True, select=["DIF001", "DIF020"])
    assert report.exit_code("warning") == 0 and {r.id for r in report.checks} == {"DIF001", "DIF020"}
