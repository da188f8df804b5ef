"""CFG040-CFG042 on hybrid configs: quiet on LFM2 and Granite 4 models transformers wrote, each firing on the
edit a bad export makes (layer_types too short or misspelt, A stored in A_log, a huge dt_bias, conv taps or
Mamba2 sizes that disagree with the tensors)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from tests.reference_engine.core.tiny_families import HYBRID
from tests.reference_engine.core.tiny_models import model_dir

SELECT = ["CFG040", "CFG041", "CFG042"]


def fired(model_dir):
    return [(f.check, f.severity.value) for f in run_checks(model_dir, select=SELECT).findings]


def edited(tmp_path, variant, config=None, tensors=None):
    out = tmp_path / "m"
    shutil.copytree(model_dir(variant), out)
    if config:
        raw = json.loads((out / "config.json").read_text())
        raw.update(config)
        (out / "config.json").write_text(json.dumps(raw))
    if tensors:
        weights = load_file(str(out / "model.safetensors"))
        for name, fn in tensors.items():
            for key in [k for k in weights if k.endswith(name)]:
                weights[key] = fn(weights[key])
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("variant", list(HYBRID.variants))
def test_transformers_written_hybrids_pass(variant):
    assert fired(model_dir(variant)) == []
    statuses = {c.id: c.status for c in run_checks(model_dir(variant), select=SELECT).checks}
    assert statuses["CFG040"] == statuses["CFG042"] == "passed"
    assert statuses["CFG041"] == ("passed" if variant.startswith(("granite", "falcon_h1")) else "skipped")


@pytest.mark.parametrize("types", [["conv", "full_attention", "conv"], ["conv", "full_attention", "conv", "mamba2"]])
def test_cfg040_layer_types_short_or_unknown(tmp_path, types):
    assert ("CFG040", "error") in fired(edited(tmp_path, "lfm2_conv3_attn1", {"layer_types": types}))


def test_a_hybrid_layer_types_of_the_wrong_length_is_one_finding(tmp_path):
    """The layer count of a hybrid's layer_types is CFG040's alone: CFG062 stays quiet on it."""
    found = run_checks(edited(tmp_path, "lfm2_conv3_attn1", {"layer_types": ["conv", "full_attention", "conv"]}),
                       select=["CFG040", "CFG062"]).findings
    assert [f.check for f in found] == ["CFG040"], found


def test_cfg041_a_stored_in_a_log(tmp_path):
    d = edited(tmp_path, "granite4_moe_rope", tensors={".A_log": lambda t: -torch.linspace(1.5, 8.0, t.numel())})
    found = run_checks(d, select=["CFG041"]).findings
    assert [(f.check, f.severity.value) for f in found] == [("CFG041", "warning")]
    assert "looks like A itself" in found[0].message


def test_cfg041_dt_bias_out_of_range_and_non_finite(tmp_path):
    big = edited(tmp_path, "granite4_moe_rope", tensors={".dt_bias": lambda t: t + 30.0})
    assert [f.message.split(":")[0] for f in run_checks(big, select=["CFG041"]).findings][0].startswith("softplus(")
    nan = edited(tmp_path / "n", "granite4_dense_nope_1group", tensors={".A_log": lambda t: t * float("nan")})
    assert fired(nan) == [("CFG041", "error")]


def test_cfg042_conv_taps_and_state_sizes(tmp_path):
    assert ("CFG042", "error") in fired(edited(tmp_path, "lfm2_conv3_attn1", {"conv_L_cache": 3}))
    assert ("CFG042", "error") in fired(edited(tmp_path / "g", "granite4_moe_rope", {"mamba_d_state": 16}))
    assert ("CFG042", "error") in fired(edited(tmp_path / "h", "granite4_moe_rope", {"mamba_n_heads": 3}))


def test_cfg043_notes_the_spelling_llama_cpp_misses(tmp_path):
    saved = run_checks(model_dir("granite4_moe_rope"), select=["CFG043"]).findings      # transformers 5 wrote it
    assert [(f.check, f.severity.value) for f in saved] == [("CFG043", "info")] and "layer 1" in saved[0].message
    hub = edited(tmp_path, "granite4_moe_rope", {"layer_types": ["mamba", "attention", "mamba", "mamba"]})
    assert run_checks(hub, select=["CFG043"]).findings == []
    assert {c.status for c in run_checks(model_dir("lfm2_conv3_attn1"), select=["CFG043"]).checks} == {"skipped"}
