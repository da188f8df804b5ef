"""CFG060-CFG063 (issue 40 ask 2): the long-context settings of a config, each fault written into a real
model's config.json (SmolLM2, Gemma 3 270M, and the shapes of Phi-3.5 / Llama 3.1 blocks) fires its check;
the real configs get nothing. Config-only runs: well under a second each."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes

IDS = ["CFG060", "CFG061", "CFG062", "CFG063"]


def config_dir(src: Path, dst: Path, edit=None) -> Path:
    dst.mkdir(parents=True)
    raw = json.loads((Path(src) / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(edit(raw) if edit else raw))
    return dst


def fired(path) -> dict:
    report = run_checks(path, select=IDS)
    no_crashes(report)
    return {f.check: f.message for f in report.findings if f.severity.value in ("warning", "error")}


def rope(raw, **block):
    return {**raw, "rope_parameters": {**raw["rope_parameters"], **block}}


SMOLLM2 = {   # SmolLM2: 8192 positions, head_dim 64, rope_theta 100k
    "yarn_without_original": ("CFG060", lambda r: rope(r, rope_type="yarn", factor=4.0)),
    "yarn_short_of_declared": ("CFG060", lambda r: {**rope(r, rope_type="yarn", factor=1.5,
                                                           original_max_position_embeddings=2048)}),
    "longrope_lists_wrong_length": ("CFG060", lambda r: rope(r, rope_type="longrope", short_factor=[1.0] * 64,
                                                             long_factor=[1.0] * 64,
                                                             original_max_position_embeddings=4096)),
    "original_past_declared": ("CFG060", lambda r: rope(r, rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                        high_freq_factor=4.0,
                                                        original_max_position_embeddings=16384)),
    "scaling_dropped": ("CFG061", lambda r: {**r, "max_position_embeddings": 131072,
                                             "original_max_position_embeddings": 8192}),
    "positions_past_wavelength": ("CFG061", lambda r: {**rope(r, rope_theta=500.0),
                                                       "max_position_embeddings": 32768}),
    "layer_types_short": ("CFG062", lambda r: {**r, "layer_types": ["full_attention"] * 29}),
    "sliding_without_window": ("CFG062", lambda r: {**r, "layer_types": ["sliding_attention", "full_attention"]
                                                    * 15}),
}
GEMMA3 = {
    "window_every_layer": ("CFG063", lambda r: {**r, "layer_types": ["sliding_attention"] * 18}),
    "rope_bases_swapped": ("CFG063", lambda r: {**r, "rope_parameters": {
        "full_attention": r["rope_parameters"]["sliding_attention"],
        "sliding_attention": r["rope_parameters"]["full_attention"]}}),
    "layer_types_long": ("CFG062", lambda r: {**r, "layer_types": r["layer_types"] + ["full_attention"]}),
}


@pytest.mark.assets
@pytest.mark.parametrize("model", ["smollm2_dir", "gemma3_270m_dir"])
def test_real_configs_are_clean(model, request, tmp_path):
    assert fired(config_dir(request.getfixturevalue(model), tmp_path / "m")) == {}


@pytest.mark.assets
@pytest.mark.parametrize("name", list(SMOLLM2) + list(GEMMA3))
def test_each_fault_fires_its_check(name, request, tmp_path):
    model, (check_id, edit) = ("smollm2_dir", SMOLLM2[name]) if name in SMOLLM2 else \
        ("gemma3_270m_dir", GEMMA3[name])
    found = fired(config_dir(request.getfixturevalue(model), tmp_path / name, edit))
    assert check_id in found, found


def test_a_partial_rotary_longrope_is_judged_by_its_rotary_width(tmp_path):
    """Phi-4-mini's shape: head_dim 128, partial_rotary_factor 0.75, 48 factors per list: right."""
    raw = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
           "num_attention_heads": 24, "num_key_value_heads": 8, "num_hidden_layers": 2, "intermediate_size": 8192,
           "vocab_size": 200064, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
           "partial_rotary_factor": 0.75, "rope_theta": 10000.0,
           "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48}}
    path = tmp_path / "phi"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(raw))
    assert "CFG060" not in fired(path)
    raw["rope_scaling"]["long_factor"] = [2.0] * 64
    (path / "config.json").write_text(json.dumps(raw))
    assert "CFG060" in fired(path)
