"""CFG020-CFG024 on the MLA (DeepSeek-V2/V3) and GLM-4.5 presets: the healthy models are clean; each broken
config or checkpoint gets the finding naming its field, never a traceback."""
from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes

CFG = ["CFG020", "CFG021", "CFG022", "CFG023", "CFG024"]


def variant(factory_model_dir, tmp_path, preset: str, config: dict | None = None, drop=(), reshape=None):
    out = tmp_path / preset
    shutil.copytree(factory_model_dir(preset), out)
    if config:
        raw = json.loads((out / "config.json").read_text())
        raw.update(config)
        (out / "config.json").write_text(json.dumps(raw))
    if drop or reshape:
        weights = load_file(out / "model.safetensors")
        for name in drop:
            del weights[name]
        for name, rows in (reshape or {}).items():
            weights[name] = weights[name][:rows].clone()
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def fired(path) -> dict[str, list]:
    report = run_checks(path, select=["config", "weights"])
    no_crashes(report)
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(f.check, []).append(f)
    return out


@pytest.mark.parametrize("preset", ["deepseek_v3", "deepseek_v2", "glm4_moe"])
def test_healthy_presets_are_clean(preset, factory_model_dir):
    found = fired(factory_model_dir(preset))
    assert not [f.message for f in sum(found.values(), []) if f.severity.value != "info"]


@pytest.mark.parametrize("preset, config, check, field", [
    ("deepseek_v3", {"kv_lora_rank": "32"}, "CFG020", "kv_lora_rank"),
    ("deepseek_v3", {"qk_rope_head_dim": 15}, "CFG020", "qk_rope_head_dim"),
    ("deepseek_v3", {"n_group": 2.5}, "CFG020", "n_group"),
    ("deepseek_v2", {"topk_method": "noaux_tc"}, "CFG020", "topk_method"),
    ("glm4_moe", {"use_qk_norm": "yes"}, "CFG020", "use_qk_norm"),
    ("glm4_moe", {"partial_rotary_factor": 1.5}, "CFG020", "partial_rotary_factor"),
    ("deepseek_v3", {"n_group": 3}, "CFG022", "n_group"),
    ("deepseek_v3", {"topk_group": 5}, "CFG022", "topk_group"),
    ("deepseek_v3", {"topk_group": 1, "num_experts_per_tok": 3}, "CFG022", "num_experts_per_tok"),
    ("deepseek_v3", {"n_group": 8, "topk_group": 4}, "CFG022", "n_group"),      # one expert per group
    ("glm4_moe", {"n_group": 3}, "CFG022", "n_group"),
    ("deepseek_v3", {"kv_lora_rank": 24}, "CFG021", "kv_lora_rank"),
    ("deepseek_v3", {"q_lora_rank": None}, "CFG021", "q_lora_rank"),
    ("deepseek_v2", {"q_lora_rank": 48}, "CFG021", "q_lora_rank"),
    ("deepseek_v3", {"qk_nope_head_dim": 8}, "CFG021", "qk_nope_head_dim"),
    ("deepseek_v3", {"v_head_dim": 8}, "CFG021", "kv_lora_rank"),                # kv_b rows, then o_proj
    ("deepseek_v3", {"first_k_dense_replace": 0}, "CFG023", "first_k_dense_replace"),
    ("glm4_moe", {"first_k_dense_replace": 2}, "CFG023", "first_k_dense_replace"),
])
def test_broken_config_is_named(preset, config, check, field, factory_model_dir, tmp_path):
    found = fired(variant(factory_model_dir, tmp_path, preset, config))
    assert check in found, {k: [f.message for f in v] for k, v in found.items()}
    assert any(f.location.logical == field for f in found[check]), [(f.message, f.location) for f in found[check]]


def test_missing_field_is_a_warning_naming_the_default(factory_model_dir, tmp_path):
    out = variant(factory_model_dir, tmp_path, "deepseek_v3")
    raw = json.loads((out / "config.json").read_text())
    del raw["kv_lora_rank"]
    (out / "config.json").write_text(json.dumps(raw))
    found = fired(out)
    assert any(f.severity.value == "warning" and "512" in f.message for f in found["CFG020"])
    assert "CFG021" in found                      # 512 does not fit the stored 32-rank latent


@pytest.mark.parametrize("preset", ["deepseek_v3", "glm4_moe"])
def test_router_bias_dropped_in_export_is_found(preset, factory_model_dir, tmp_path):
    out = variant(factory_model_dir, tmp_path, preset, drop=["model.layers.1.mlp.gate.e_score_correction_bias"])
    found = fired(out)
    assert "CFG024" in found and "layer 1" in found["CFG024"][0].message
