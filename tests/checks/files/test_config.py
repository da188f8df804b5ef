"""Config checks against configs transformers itself writes (rope_parameters, dtype, explicit head_dim: the
oracle says these are valid) and the silent/info edges the zoo does not cover."""
from __future__ import annotations

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks import zoo

HF_VARIANTS = ("qwen3_qknorm_odd_head_dim", "llama_gqa4_tied_bias", "llama_rope_llama3", "qwen2_rope_yarn_mscale",
               "llama_rope_dynamic")


def fired(model_dir, select):
    return [(f.check, f.severity.value) for f in run_checks(model_dir, select=select).findings]


@pytest.mark.parametrize("variant", HF_VARIANTS)
def test_transformers_written_configs_pass(variant, tmp_path):
    from tests.hf_models import build_hf_model
    d = build_hf_model(tmp_path / "m", variant)
    assert fired(d, ["config", "weights"]) == []


def test_rope_parameters_block_is_checked(broken_copy):
    d = broken_copy("llama", zoo.edit_json("config.json", rope_scaling=None,
                                           rope_parameters={"rope_type": "longrope", "rope_theta": 1e4,
                                                            "short_factor": [1.0] * 3, "long_factor": [1.0] * 8}))
    assert fired(d, ["CFG003"]) == [("CFG003", "error")]


def test_shorter_tokenizer_limit_is_info(broken_copy):
    d = broken_copy("llama", zoo.edit_json("tokenizer_config.json", model_max_length=128))
    assert fired(d, ["CFG004"]) == [("CFG004", "info")]
    unset = broken_copy("llama", zoo.edit_json("tokenizer_config.json", model_max_length=int(1e30)))
    assert fired(unset, ["CFG004"]) == []


@pytest.mark.parametrize("theta", [0.0, -10000.0])
def test_non_positive_rope_theta_is_named_by_cfg001_and_blocks_the_engine(broken_copy, theta):
    """CFG005 has no rope_theta branch: the parser refuses theta <= 0, so CFG001 reports the exact field and
    the engine checks are skipped (a NaN RoPE table would only bury the cause under consequences)."""
    d = broken_copy("llama", zoo.edit_json("config.json", rope_theta=theta))
    report = run_checks(d, select=["CFG001", "CFG005", "GLD002"], quick=True)
    finding, *unrun = report.findings
    assert (finding.check, finding.severity.value) == ("CFG001", "error") and "'rope_theta'" in finding.message
    # CFG005 and GLD002 were named by their ids: each skip is an error saying so and why (run/honoured.py)
    assert [(f.check, "did not run" in f.message) for f in unrun] == [("CFG005", True), ("GLD002", True)]
    assert {c.id: c.status for c in report.checks if c.id != "CFG001"} == {"CFG005": "failed", "GLD002": "failed"}
