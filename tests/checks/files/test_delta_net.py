"""CFG050-CFG053 (Gated DeltaNet config and tensors): silent on the Qwen3-Next / Qwen3.5 models transformers
writes, and each fires on the broken copy built for it."""
from __future__ import annotations

import math
import shutil

import pytest
from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from tests.checks import zoo
from tests.reference_engine.core.tiny_models import model_dir

DELTA_NET = ["CFG050", "CFG051", "CFG052", "CFG053"]


def fired(d, select=DELTA_NET):
    return sorted((f.check, f.severity.value) for f in run_checks(d, select=select).findings)


def broken(tmp_path, apply, variant="next_moe_interval"):
    d = tmp_path / "m"
    shutil.copytree(model_dir(variant), d)
    apply(d)
    return d


def set_tensor(name: str, fill):
    def apply(d):
        tensors = load_file(d / "model.safetensors")
        fill(tensors[name])
        save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return apply


A_LOG, DT_BIAS = "model.layers.0.linear_attn.A_log", "model.layers.2.linear_attn.dt_bias"


@pytest.mark.parametrize("variant", ["next_moe_interval", "qwen35_dense_tied", "qwen35_moe"])
def test_transformers_written_hybrids_pass(variant):
    assert fired(model_dir(variant), DELTA_NET + ["config", "weights"]) == []


@pytest.mark.parametrize("name,value", [(A_LOG, math.nan), (DT_BIAS, math.inf)])
def test_non_finite_decay_parameters_are_an_error(tmp_path, name, value):
    d = broken(tmp_path, set_tensor(name, lambda t: t.__setitem__(1, value)))
    report = run_checks(d, select=["CFG050"])
    (finding,) = report.findings
    assert (finding.check, finding.severity.value) == ("CFG050", "error") and name in finding.message


@pytest.mark.parametrize("value,what", [(40.0, "forgets everything"), (-40.0, "never forgets")])
def test_degenerate_decay_is_a_warning(tmp_path, value, what):
    d = broken(tmp_path, set_tensor(A_LOG, lambda t: t.__setitem__(0, value)))
    (finding,) = run_checks(d, select=["CFG051"]).findings
    assert finding.severity.value == "warning" and what in finding.message and "head 0" in finding.message


@pytest.mark.parametrize("edit,severity", [
    (dict(layer_types=["linear_attention", "full_attention"]), "error"),              # 2 kinds for 4 layers
    (dict(layer_types=["linear_attention", "full_attention", "mamba", "full_attention"]), "error"),
    (dict(full_attention_interval=4), "warning"),                                       # the list says every 2nd
    (dict(full_attention_interval=0), "error"),
])
def test_layer_types_that_do_not_describe_the_layers(tmp_path, edit, severity):
    d = broken(tmp_path, zoo.edit_json("config.json", **edit))
    assert fired(d, ["CFG052"]) == [("CFG052", severity)]


def test_layer_types_matching_the_interval_pass(tmp_path):
    d = broken(tmp_path, zoo.edit_json("config.json", full_attention_interval=2))
    assert fired(d, ["CFG052"]) == []


def test_conv_kernel_that_disagrees_with_the_weights(tmp_path):
    d = broken(tmp_path, zoo.edit_json("config.json", linear_conv_kernel_dim=3))
    findings = run_checks(d, select=["CFG053"]).findings
    assert {f.check for f in findings} == {"CFG053"} and len(findings) == 2      # both DeltaNet layers
    assert "4 taps, linear_conv_kernel_dim says 3" in findings[0].message


def test_value_heads_that_disagree_with_the_state_tensors(tmp_path):
    d = broken(tmp_path, zoo.edit_json("config.json", linear_num_value_heads=6))
    messages = [f.message for f in run_checks(d, select=["CFG053"]).findings]
    assert any("A_log has shape [4], the config gives [6]" in m for m in messages)


def test_other_architectures_are_skipped(base_dir):
    report = run_checks(base_dir("llama"), select=DELTA_NET)
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(DELTA_NET, "skipped")


def test_broken_model_is_refused_by_the_engine_in_one_line(tmp_path):
    from reference_engine.core import CoreEngine
    from reference_engine.errors import ModelDirError
    d = broken(tmp_path, zoo.edit_json("config.json", layer_types=["linear_attention"]))
    with pytest.raises(ModelDirError, match="layer_types"):
        CoreEngine.from_pretrained(d)
