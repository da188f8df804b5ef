"""Rope scaling through conversion (GGF020 with the config.json beside the GGUF, checks/long_context/conversion.py):
a tiny yarn Llama converted by llama.cpp's own converter is quiet; the same file with the scaling keys dropped
(Qwen3-MoE's converter, llama.cpp#13322), another factor, original length or attention factor, or a llama3 block
without its rope_freqs tensor, is named. The yarn attention factor is read as transformers reads it (the engine's
reading compared with transformers' own rope init). About a second per file once the conversion is cached."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes
from tests.checks.gguf.converted import YARN, beside, tiny_conversion
from tests.checks.gguf.edited import edited_gguf
from tests.checks.zoo_gguf import DROP

SCALE = "llama.rope.scaling."
DEFAULT_YARN_SCALE = 0.1 * math.log(4.0) + 1


def _no_attention_factor(raw):
    block = {k: v for k, v in raw["rope_scaling"].items() if k != "attention_factor"}
    return {**raw, "rope_scaling": {**block, "mscale": 1.0, "mscale_all_dim": 1.0}}


def _legacy_type_key(raw):
    block = {("type" if k == "rope_type" else k): v for k, v in raw["rope_scaling"].items()}
    return {**raw, "rope_scaling": block}


def _llama3(raw):
    return {**raw, "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}


# name -> (metadata changed on the converted file, tensors changed, config edit, the words GGF020 must say)
BROKEN = {
    "yarn_not_written": ({SCALE + k: DROP for k in ("type", "factor", "original_context_length", "yarn_attn_factor")},
                         None, None, "config.json's yarn rope scaling (factor 4, original 64) is not in the GGUF "
                                     "(no llama.rope.scaling.type): llama.cpp reads the model unscaled"),
    "yarn_not_written_legacy_type_key": ({SCALE + "type": DROP, SCALE + "factor": DROP}, None, _legacy_type_key,
                                         "config.json's yarn rope scaling (factor 4, original 64) is not in the GGUF"),
    "other_factor": ({SCALE + "factor": 2.0}, None, None,
                     "llama.rope.scaling.factor is 2, config.json's yarn factor 4"),
    "other_original": ({SCALE + "original_context_length": 128}, None, None,
                       "llama.rope.scaling.original_context_length is 128, config.json's "
                       "original_max_position_embeddings 64"),
    "attention_factor_dropped": ({SCALE + "yarn_attn_factor": DROP}, None, None,
                                 f"config.json's yarn attention factor 1 (as transformers reads attention_factor / "
                                 f"mscale / mscale_all_dim) is not in the GGUF (no llama.rope.scaling.yarn_attn_factor)"
                                 f": llama.cpp scales by 0.1 ln(4) + 1 = {DEFAULT_YARN_SCALE:.4g}"),
    "attention_factor_other": ({SCALE + "yarn_attn_factor": 0.5}, None, None,
                               "llama.rope.scaling.yarn_attn_factor is 0.5, transformers reads config.json's yarn "
                               "attention factor as 1"),
    "mscale_dropped": ({SCALE + "yarn_attn_factor": DROP}, None, _no_attention_factor,
                       "config.json's yarn attention factor 1 (as transformers reads"),
    "llama3_without_rope_freqs": ({}, None, _llama3, "config.json's llama3 rope scaling (factor 4, original 64) is "
                                                    "not in the GGUF: no rope_freqs.weight tensor"),
}
HEALTHY = {
    "as_converted": ({}, None, None),
    "legacy_type_key": ({}, None, _legacy_type_key),
    "mscale_kept": ({}, None, _no_attention_factor),        # mscale / mscale_all_dim 1/1: attention factor 1, stored
    "llama3_with_rope_freqs": ({SCALE + k: DROP for k in ("type", "factor", "original_context_length",
                                                           "yarn_attn_factor")},
                               {"rope_freqs.weight": np.ones(8, np.float32)}, _llama3),
}


def _ggf020(tmp_path, name, metadata, tensors, config_edit) -> list[str]:
    hf, gguf = tiny_conversion()
    path = gguf if not (metadata or tensors) else edited_gguf(gguf, tmp_path / name / gguf.name, metadata, tensors)
    report = run_checks(beside(path, hf, tmp_path / name, config_edit), select=["GGF020"])
    no_crashes(report)
    return [f.message for f in report.findings if f.check == "GGF020" and f.severity.value == "warning"]


@pytest.mark.assets
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_rope_scaling_lost_or_changed_in_conversion_is_named(name, tmp_path):
    metadata, tensors, edit, words = BROKEN[name]
    found = _ggf020(tmp_path, name, metadata, tensors, edit)
    assert any(words in m for m in found), found


@pytest.mark.assets
@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_rope_scaling_carried_by_the_conversion_is_quiet(name, tmp_path):
    assert _ggf020(tmp_path, name, *HEALTHY[name]) == []


BLOCKS = {
    "attention_factor": {"attention_factor": 1.0},
    "mscale_and_all_dim": {"mscale": 0.707, "mscale_all_dim": 1.0},
    "mscale_only": {"mscale": 0.707},
    "nothing_given": {},
    "mscale_over_all_dim": {"factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.5},
}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_yarn_attention_factor_read_as_transformers_reads_it(name):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from reference_engine.config import parse_config
    from reference_engine.core.rope import build_rope_table
    block = {k: v for k, v in {**YARN, "attention_factor": None, **BLOCKS[name]}.items() if v is not None}
    raw = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32,
           "max_position_embeddings": 256, "rope_theta": 10000.0, "rope_scaling": block}
    ours = build_rope_table(parse_config(raw)).attention_scaling
    theirs = ROPE_INIT_FUNCTIONS["yarn"](LlamaConfig(**raw), "cpu")[1]
    assert ours == pytest.approx(theirs, rel=1e-6), (ours, theirs)
