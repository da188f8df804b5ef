"""Falcon-H1 beyond what the hybrid tests compare for every variant (test_hybrid_families.py: logits within 1e-4
of transformers, greedy, chunked prefill, step decode, unequal batches): every multiplier of the test models
matters (the fidelity test is not passing by accident), each layer keeps K/V and a Mamba2 state (bytes in the
cache, `probe kv` and the memory plan), broken multipliers and sizes are one-line errors."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from llmdoctor.run.workloads import CHECK_QUICK
from probes.kv import ModelKv
from reference_engine.budget.plan import GiB, make_plan
from reference_engine.config import load_config
from reference_engine.core import CoreEngine
from reference_engine.core.cache.layout import ParallelLayout
from reference_engine.core.families import cache_layout, state_bytes
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_models import hf_model, model_dir, random_ids

VARIANT = "falcon_h1_norm_before_gate"      # 3 layers, mamba_d_ssm 48 = 4 heads x 12, 2 groups, d_state 8, conv 4


def edited(tmp_path, edit: dict):
    out = tmp_path / "m"
    shutil.copytree(model_dir(VARIANT), out)
    raw = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**raw, **edit}))
    return out


@pytest.mark.parametrize("edit", [
    {"embedding_multiplier": 1.0}, {"lm_head_multiplier": 1.0}, {"key_multiplier": 1.0},
    {"attention_in_multiplier": 1.0}, {"attention_out_multiplier": 1.0}, {"ssm_in_multiplier": 1.0},
    {"ssm_out_multiplier": 1.0}, {"ssm_multipliers": [1.0] * 5}, {"mlp_multipliers": [1.0, 1.0]},
    {"mamba_norm_before_gate": False},
], ids=lambda e: next(iter(e)))
def test_every_multiplier_of_the_test_model_matters(tmp_path, edit):
    ids = random_ids(40, seed=7)
    ours = CoreEngine.from_pretrained(edited(tmp_path, edit)).logits(ids)
    assert (ours - hf_logits(hf_model(VARIANT), ids)).abs().max().item() > 1e-2


def test_each_layer_keeps_kv_and_a_state():
    d = model_dir(VARIANT)
    config = load_config(d)
    assert all(isinstance(c, ParallelLayout) for c in cache_layout(config))
    # per layer: conv (48 + 2*2*8) x (4 - 1) + ssm 4 x 12 x 8 floats; K and V of 2 heads x head_dim 16 per token
    per_layer = (80 * 3 + 4 * 12 * 8) * 4
    kv = ModelKv.from_dir(d, "float32")
    assert kv.state_bytes_per_sequence == 3 * per_layer and kv.bytes_per_token == 3 * 2 * 2 * 16 * 4
    assert state_bytes(config, range(1, 2)) == per_layer
    eng = CoreEngine.from_pretrained(d, block_size=4)
    assert eng.cache.states.bytes_per_sequence == kv.state_bytes_per_sequence
    assert all(p.numel() > 0 for p in eng.cache.k_pools) and sorted(eng.cache.states.layers) == [0, 1, 2]
    eng.prefill(["a"], [random_ids(9)])
    assert eng.cache.length("a") == 9 and len(eng.cache.block_table("a")) == 3
    one = make_plan(d, 64 * GiB, workload=CHECK_QUICK)
    many = make_plan(d, 64 * GiB, workload=replace(CHECK_QUICK, sequences=CHECK_QUICK.sequences + 10))
    assert many.resident_peak_bytes - one.resident_peak_bytes == 10 * kv.state_bytes_per_sequence


@pytest.mark.parametrize("edit, error, words", [
    ({"ssm_multipliers": [1.0, 2.0]}, "ModelDirError", "'ssm_multipliers' must list 5 finite numbers"),
    ({"key_multiplier": "0.7"}, "ModelDirError", "'key_multiplier' must be a finite number"),
    ({"lm_head_multiplier": 0}, "ModelDirError", "every logit would be 0"),
    ({"mamba_d_ssm": 50}, "ModelDirError", "must equal the Mamba2 inner size (50)"),
    ({"mamba_n_groups": 3}, "ModelDirError", "in groups of mamba_n_groups"),
    ({"mamba_d_ssm": None, "mamba_d_head": "auto"}, "ModelDirError", "has shape"),   # inner 2 x 32, stored 48
])
def test_broken_falcon_h1_configs_are_one_line_errors(tmp_path, edit, error, words):
    with pytest.raises(Exception) as caught:
        CoreEngine.from_pretrained(edited(tmp_path, edit))
    assert type(caught.value).__name__ == error and words in str(caught.value) and "\n" not in str(caught.value)
