"""CFG060-CFG063: the long-context settings of a config, each fault written into a real
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


def with_file(path: Path, name: str, content: dict) -> Path:
    (path / name).write_text(json.dumps(content))
    return path


@pytest.mark.assets
def test_a_claim_past_the_rope_base_and_the_files_training_length_is_a_warning(smollm2_dir, tmp_path):
    """A config raised to 16x the length its tokenizer states (131072 at rope_theta 100k, no scaling), or to
    65536 at a rope base of 10k (6.6x) with no length stated anywhere: both under twice the longest rotary
    wavelength (~890k and ~94k positions), so only the base and the files' evidence catch them; the finding
    names what it read. The same config beside a tokenizer that states its 8192 stays quiet."""
    raised = config_dir(smollm2_dir, tmp_path / "raised", lambda r: {**r, "max_position_embeddings": 131072})
    with_file(raised, "tokenizer_config.json", {"model_max_length": 8192})
    found = run_checks(raised, select=["CFG061"]).findings
    assert [f.severity.value for f in found] == ["warning"], found
    assert "tokenizer_config.json model_max_length says 8192 (16x less)" in found[0].message
    assert found[0].evidence["training_length"] == [{"source": "tokenizer_config.json model_max_length",
                                                     "tokens": 8192}]
    small_base = config_dir(smollm2_dir, tmp_path / "base", lambda r: {**rope(r, rope_theta=10000.0),
                                                                       "max_position_embeddings": 65536})
    found = fired(small_base)
    assert "no training length in the files" in found.get("CFG061", ""), found
    twin = with_file(config_dir(smollm2_dir, tmp_path / "twin"), "tokenizer_config.json", {"model_max_length": 8192})
    assert fired(twin) == {}


# full-size configs of models whose window on every layer is their design: config-only, nothing to fire
MISTRAL_V01 = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
               "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
               "max_position_embeddings": 32768, "sliding_window": 4096, "rope_theta": 10000.0, "vocab_size": 32000}
PHI3_MINI_4K = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
                "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 32,
                "num_hidden_layers": 32, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
                "sliding_window": 2047, "rope_theta": 10000.0, "rope_scaling": None, "vocab_size": 32064}


@pytest.mark.parametrize("raw", [MISTRAL_V01, PHI3_MINI_4K], ids=["mistral-7b-v0.1", "phi-3-mini-4k"])
def test_a_window_declared_for_every_layer_is_no_config_fault(raw, tmp_path):
    path = tmp_path / "m"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(raw))
    assert fired(path) == {}


# Granite 4.0-H's shape (config-only): 131072 positions at rope_theta 10000 with no scaling, its attention
# without positions ("nope"): the rope bounds no length there; the same config with rope is the claim
GRANITE4_H = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 1536,
              "intermediate_size": 512, "num_attention_heads": 12, "num_key_value_heads": 4, "num_hidden_layers": 4,
              "layer_types": ["mamba", "attention", "mamba", "mamba"], "max_position_embeddings": 131072,
              "rope_theta": 10000.0, "vocab_size": 100352, "num_local_experts": 0, "shared_intermediate_size": 4096,
              "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_expand": 2}


@pytest.mark.parametrize("positions,fires", [("nope", False), ("rope", True)])
def test_a_length_claim_needs_a_rotary_layer(positions, fires, tmp_path):
    path = tmp_path / "m"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({**GRANITE4_H, "position_embedding_type": positions}))
    assert ("CFG061" in fired(path)) is fires, fired(path)


def test_a_wrong_length_layer_types_is_one_finding(tmp_path):
    """The layer count of a non-hybrid's layer_types is CFG062's alone: CFG040 (the hybrids' check) stays quiet."""
    raw = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "head_dim": 16,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128,
           "vocab_size": 256, "max_position_embeddings": 512, "rope_theta": 10000.0,
           "layer_types": ["full_attention"] * 3}
    path = tmp_path / "qwen3"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(raw))
    report = run_checks(path, select=["CFG040", "CFG062"])
    no_crashes(report)
    assert [f.check for f in report.findings] == ["CFG062"], report.findings
