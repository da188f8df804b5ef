"""CFG044-CFG046 (and CFG042's Falcon-H1 sizes) on Falcon-H1 configs: quiet on the models transformers wrote, each
firing on the edit a bad export makes (a multiplier zeroed, negative, NaN or a list of the wrong length; an output
norm or bias switched off over stored tensors, or on with none stored; a mamba_d_ssm the heads do not divide), and
CFG046's notes on what llama.cpp's converter would not carry over."""
from __future__ import annotations

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.files.test_hybrid_config import edited
from tests.reference_engine.core.tiny_families import HYBRID
from tests.reference_engine.core.tiny_models import model_dir

FALCONS = [v for v in HYBRID.variants if v.startswith("falcon_h1")]
SELECT = ["CFG042", "CFG044", "CFG045"]


def found(model_dir, select=SELECT):
    return [(f.check, f.severity.value, f.message) for f in run_checks(model_dir, select=select).findings]


@pytest.mark.parametrize("variant", FALCONS)
def test_transformers_written_falcon_h1_passes(variant):
    report = run_checks(model_dir(variant), select=SELECT)
    assert report.findings == []
    assert {c.id: c.status for c in report.checks} == dict.fromkeys(SELECT, "passed")


@pytest.mark.parametrize("edit, severity, words", [
    ({"ssm_out_multiplier": 0}, "error", "ssm_out_multiplier is 0: the Mamba2 branch is multiplied by zero"),
    ({"lm_head_multiplier": 0.0}, "error", "lm_head_multiplier is 0: the logits"),
    ({"ssm_multipliers": [1.0, 1.0, 1.0, 1.0, 0.0]}, "error", "ssm_multipliers[4] is 0: in_proj's dt"),
    ({"ssm_multipliers": [1.0, 1.0, 1.0]}, "error", "ssm_multipliers must list 5 numbers (in_proj's z, in_proj's x"),
    ({"mlp_multipliers": [1.3, "0.7"]}, "error", "mlp_multipliers[1] is '0.7', not a finite number"),
    ({"key_multiplier": float("nan")}, "error", "key_multiplier is nan, not a finite number"),
    ({"attention_out_multiplier": -0.8}, "warning", "attention_out_multiplier is negative (-0.8)"),
])
def test_cfg044_multipliers_that_make_no_sense(tmp_path, edit, severity, words):
    (check, sev, message), = found(edited(tmp_path, "falcon_h1_norm_before_gate", edit), ["CFG044"])
    assert (check, sev) == ("CFG044", severity) and words in message


@pytest.mark.parametrize("variant, edit, words", [
    ("falcon_h1_norm_before_gate", {"mamba_rms_norm": False}, "mamba_rms_norm is false but 3 the Mamba2 output norm"),
    ("falcon_h1_gate_biases_tied", {"mamba_rms_norm": True}, "mamba_rms_norm is true but no the Mamba2 output norm"),
    ("falcon_h1_gate_biases_tied", {"projectors_bias": False}, "projectors_bias is false but 2 the Mamba2 out_proj"),
    ("falcon_h1_norm_before_gate", {"attention_bias": True}, "attention_bias is true but no the attention biases"),
])
def test_cfg045_switches_that_disagree_with_the_tensors(tmp_path, variant, edit, words):
    (check, sev, message), = found(edited(tmp_path, variant, edit), ["CFG045"])
    assert (check, sev) == ("CFG045", "error") and words in message


def test_cfg042_falcon_h1_sizes(tmp_path):
    # mamba_d_ssm 48 = 4 heads x 12: 50 does not divide, 64 divides but disagrees with the tensors
    (_, _, message), = found(edited(tmp_path, "falcon_h1_norm_before_gate", {"mamba_d_ssm": 50}), ["CFG042"])
    assert "must equal mamba_d_ssm (50)" in message
    wide = found(edited(tmp_path / "w", "falcon_h1_norm_before_gate", {"mamba_d_ssm": 64, "mamba_d_head": 16}),
                 ["CFG042"])
    assert wide[0][:2] == ("CFG042", "error") and "mamba_d_ssm = 64" in wide[0][2]


def test_cfg046_notes_what_llama_cpp_would_not_carry_over():
    statuses = {c.id: c.status for c in run_checks(model_dir("falcon_h1_norm_after_gate"), select=["CFG046"]).checks}
    assert statuses == {"CFG046": "passed"}                    # head_dim written, untied, no biases, norm after gate
    (sev, message), = [(s, m) for _, s, m in found(model_dir("falcon_h1_norm_before_gate"), ["CFG046"])]
    assert sev == "info" and "llama.cpp norms the Mamba2 output after the gate" in message
    notes = [m for _, s, m in found(model_dir("falcon_h1_gate_biases_tied"), ["CFG046"]) if s == "info"]
    assert [m.split(": ")[1].split(" ")[0] for m in notes] == ["tied", "attention_bias", "mamba_proj_bias", "no"]
    assert "embedding_multiplier 1.7 != lm_head_multiplier 0.6" in notes[0] and "KeyError 'head_dim'" in notes[3]
