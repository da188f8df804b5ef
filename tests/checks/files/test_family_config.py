"""CFG030-CFG034: the config fields of SmolLM3, OLMo 2/3, MiniMax-M2 and Llama 4 text. Each fault is a factory
model of the family with one config.json field broken; the check names that field (never a traceback), and the
engine-backed checks skip with the engine's one-line reason instead of running a wrong model. Healthy models of
each family get no finding."""
from __future__ import annotations

import shutil

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks import zoo
from tests.checks.conftest import no_crashes

IDS = ["CFG030", "CFG031", "CFG032", "CFG033", "CFG034"]
DELETE = zoo.DELETE

# (preset, config.json edits, check id, severity, field named in the message)
FAULTS = {
    "no_rope_layers_short": ("smollm3", dict(no_rope_layers=[1]), "CFG030", "error", "no_rope_layers"),
    "no_rope_layers_long": ("llama4", dict(no_rope_layers=[1, 0, 1]), "CFG030", "warning", "no_rope_layers"),
    "no_rope_layers_values": ("llama4", dict(no_rope_layers=[1, 2]), "CFG030", "error", "no_rope_layers"),
    "no_rope_layers_string": ("smollm3", dict(no_rope_layers="1,0"), "CFG030", "error", "no_rope_layers"),
    "nope_interval_zero": ("smollm3", dict(no_rope_layers=DELETE, no_rope_layer_interval=0), "CFG030", "error",
                           "no_rope_layer_interval"),
    "chunk_zero": ("llama4", dict(attention_chunk_size=0), "CFG031", "error", "attention_chunk_size"),
    "chunk_string": ("llama4", dict(attention_chunk_size="8192"), "CFG031", "error", "attention_chunk_size"),
    "layer_types_short": ("olmo3", dict(layer_types=["sliding_attention"]), "CFG031", "error", "layer_types"),
    "layer_types_unknown": ("olmo3", dict(layer_types=["sliding", "full_attention"]), "CFG031", "error",
                            "layer_types"),
    "moe_step_zero": ("llama4", dict(interleave_moe_layer_step=0), "CFG032", "error", "interleave_moe_layer_step"),
    "moe_step_past_layers": ("llama4", dict(interleave_moe_layer_step=5), "CFG032", "warning",
                             "interleave_moe_layer_step"),
    "moe_layers_out_of_range": ("llama4", dict(moe_layers=[1, 7]), "CFG032", "error", "moe_layers"),
    "experts_per_tok_too_many": ("llama4", dict(num_experts_per_tok=9), "CFG032", "error", "num_experts_per_tok"),
    "floor_scale_zero": ("llama4", dict(floor_scale=0), "CFG033", "error", "floor_scale"),
    "qk_norm_string": ("llama4", dict(use_qk_norm="false"), "CFG033", "error", "use_qk_norm"),
    "rotary_dim_odd": ("minimax_m2", dict(rotary_dim=7), "CFG034", "error", "rotary_dim"),
    "minimax_shared_experts": ("minimax_m2", dict(shared_intermediate_size=64), "CFG034", "warning",
                               "shared_intermediate_size"),
    "minimax_softmax": ("minimax_m2", dict(scoring_func="softmax"), "CFG034", "warning", "scoring_func"),
}


@pytest.mark.parametrize("preset", ["smollm3", "olmo2", "olmo3", "minimax_m2", "llama4"])
def test_healthy_family_configs_have_no_finding(factory_model_dir, preset):
    report = run_checks(factory_model_dir(preset), select=IDS + ["config"])
    no_crashes(report)
    assert report.findings == []


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_broken_field_is_named(factory_model_dir, tmp_path, fault):
    preset, edits, check_id, severity, field = FAULTS[fault]
    d = tmp_path / "model"
    shutil.copytree(factory_model_dir(preset), d)
    zoo.edit_json("config.json", **edits)(d)
    report = run_checks(d, select=IDS, quick=True)
    no_crashes(report)
    got = [(f.check, f.severity.value) for f in report.findings]
    assert got == [(check_id, severity)], [f.message for f in report.findings]
    assert f"'{field}'" in report.findings[0].message


def test_engine_refuses_a_short_no_rope_layers_in_one_line(factory_model_dir, tmp_path):
    """The engine reads the same field: the engine-backed checks skip with its one-line reason."""
    d = tmp_path / "model"
    shutil.copytree(factory_model_dir("smollm3"), d)
    zoo.edit_json("config.json", no_rope_layers=[1])(d)
    report = run_checks(d, select=["CFG030", "GLD002"], quick=True)
    no_crashes(report)
    status = {c.id: c for c in report.checks}
    # GLD002 was named by its id: its skip is an error finding carrying the reason (llmdoctor/run/honoured.py)
    assert status["GLD002"].status == "failed" and "no_rope_layers" in status["GLD002"].reason


@pytest.mark.parametrize("variant", ["smollm3_window_interval", "olmo3_windows_yarn", "minimax_m2_partial_rotary",
                                     "llama4_chunked_nope_moe"])
def test_transformers_written_family_configs_pass(variant):
    """Configs as transformers writes them (layer_types with "chunked_attention", per-kind rope_parameters,
    rotary_dim beside partial_rotary_factor, moe_layers) get no config or weight finding."""
    from tests.reference_engine.core.tiny_models import model_dir
    report = run_checks(model_dir(variant), select=["config", "weights"])
    no_crashes(report)
    assert report.findings == []
