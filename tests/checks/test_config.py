"""Config checks against configs transformers itself writes (rope_parameters, dtype, explicit head_dim: the
oracle says these are valid) and the silent/info edges the zoo does not cover."""
from __future__ import annotations

import pytest

from llmdoctor.runner import run_checks
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
