"""`llmdoctor diff` and `baseline` on the newer families: a healthy tiny model against the same model with one
tensor of layer k changed names layer k as where they part ways, for gpt-oss (its sinks), DeepSeek-V3 (MLA's
kv_b), the hybrids' recurrent tensors (Granite 4's Mamba2 A_log, Qwen3-Next's Gated DeltaNet conv, LFM2's
short conv), GLM-4.5 (q bias), MiniMax-M2 and OLMo 2/3 (q/k norm over the whole projection), Llama 4 and SmolLM3
(v on a RoPE / NoPE layer); `baseline` recorded on one model of each kind passes the identical model and fails
the faulty one. (~20 s in all on the shared 2-core machine, most of it the first transformers import for the
hybrids.)"""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from llmdoctor.cli import cli
from llmdoctor.run.diff_runner import run_diff
from reference_engine.testing.factory import build_model_dir
from tests.checks.zoo import edit_tensors
from tests.reference_engine.core.tiny_models import checkable

LAYER = 2
GPT_OSS_LAYERS = ["sliding_attention", "full_attention"] * 2


def shifted(name: str, by: float):
    def change(t: dict, d) -> None:
        t[name] = t[name] + by
    return edit_tensors(change)


def scaled(name: str, factor: float):
    def change(t: dict, d) -> None:
        t[name] = t[name] * factor
    return edit_tensors(change)


p = f"model.layers.{LAYER}."
# family -> (build(out) -> healthy checkable model dir, fault planted in layer LAYER's mixer)
CASES = {
    "gpt_oss_sinks": (lambda out: build_model_dir(out, "gpt_oss", num_hidden_layers=4, layer_types=GPT_OSS_LAYERS),
                      shifted(p + "self_attn.sinks", 2.0)),
    "deepseek_v3_mla_kv_b": (lambda out: build_model_dir(out, "deepseek_v3", num_hidden_layers=4),
                             scaled(p + "self_attn.kv_b_proj.weight", 1.5)),
    "granite4_mamba2_A_log": (lambda out: checkable(out, "granite4_moe_rope"),
                              scaled(p + "mamba.A_log", 1.5)),
    "qwen3_next_delta_net_conv": (lambda out: checkable(out, "next_moe_interval"),
                                  scaled(p + "linear_attn.conv1d.weight", 1.5)),
    "lfm2_short_conv": (lambda out: checkable(out, "lfm2_conv3_attn1"),
                        scaled(p + "conv.conv.weight", 1.5)),
    "glm4_moe_attention_bias": (lambda out: build_model_dir(out, "glm4_moe", num_hidden_layers=4),
                                shifted(p + "self_attn.q_proj.bias", 0.5)),
    "minimax_m2_k_norm": (lambda out: build_model_dir(out, "minimax_m2", num_hidden_layers=4),
                          scaled(p + "self_attn.k_norm.weight", 1.5)),
    # v, not q or k: Llama 4's l2 q/k norm makes the scores blind to a scaled q or k projection
    "llama4_v_proj": (lambda out: build_model_dir(out, "llama4", num_hidden_layers=4, no_rope_layers=[1, 1, 0, 1]),
                      scaled(p + "self_attn.v_proj.weight", 1.5)),
    # layer 2 a NoPE layer; v, not k: the factory's small random keys leave the scores near uniform, scaling them
    # moves nothing past the -40 dB line
    "smollm3_nope_v_proj": (lambda out: build_model_dir(out, "smollm3", num_hidden_layers=4,
                                                        no_rope_layers=[1, 1, 0, 1]),
                            scaled(p + "self_attn.v_proj.weight", 1.5)),
    "olmo2_k_norm": (lambda out: build_model_dir(out, "olmo2", num_hidden_layers=4),
                     scaled(p + "self_attn.k_norm.weight", 1.5)),
    "olmo3_k_norm": (lambda out: build_model_dir(out, "olmo3", num_hidden_layers=4,
                                                 layer_types=["sliding_attention"] * 3 + ["full_attention"]),
                     scaled(p + "self_attn.k_norm.weight", 1.5)),
}
# the families `baseline` round-trips on (the others above share its code path with one of them)
BASELINE_CASES = ["granite4_mamba2_A_log", "glm4_moe_attention_bias", "minimax_m2_k_norm", "llama4_v_proj",
                  "smollm3_nope_v_proj", "olmo3_k_norm"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    built = {}

    def pair(case: str):
        if case not in built:
            build, fault = CASES[case]
            root = tmp_path_factory.mktemp(case)
            healthy = build(root / "healthy")
            faulty = shutil.copytree(healthy, root / "faulty")
            fault(faulty)
            built[case] = healthy, faulty
        return built[case]
    return pair


@pytest.mark.parametrize("case", CASES)
def test_first_divergent_layer_is_the_faulty_one(case, pairs):
    healthy, faulty = pairs(case)
    report = run_diff(healthy, faulty, quick=True, select=["DIF020", "DIF040"])
    assert not [r for r in report.checks if r.status not in ("passed", "failed")], report.checks
    (where,) = report.findings_for("DIF040")
    assert where.severity.value == "warning"
    for key in ("first_crossing", "first_own_crossing", "largest_own_error"):
        assert where.evidence[key]["where"] == f"layer {LAYER} attn", (key, where.message)
    rows = where.evidence["layers"]
    # isolated: no other mixer, MLP or norm has an error of its own; the residual is bit-identical before LAYER
    assert all(r["attn_own_db"] == "-inf" for r in rows if r["layer"] != LAYER), rows
    assert all(r["mlp_own_db"] == "-inf" and r["norms_own_db"] == "-inf" for r in rows), rows
    assert all(r["hidden_db"] == "-inf" for r in rows if r["layer"] < LAYER), rows
    tensors = report.findings_for("DIF020")
    assert any(f"layers.{LAYER}." in f.message and f.severity.value == "warning" for f in tensors)


@pytest.mark.parametrize("case", BASELINE_CASES)
def test_baseline_round_trip(case, pairs, tmp_path):
    healthy, faulty = pairs(case)
    golden = tmp_path / "golden.json"
    runner = CliRunner()
    written = runner.invoke(cli, ["baseline", str(healthy), "-o", str(golden), "--quick"])
    assert written.exit_code == 0, written.output

    def drift(model):
        result = runner.invoke(cli, ["check", str(model), "--select", "DRF", "--baseline", str(golden), "--quick",
                                     "--format", "json"])
        return result.exit_code, json.loads(result.output)
    code, same = drift(shutil.copytree(healthy, tmp_path / "same"))
    assert code == 0 and {c["id"]: c["status"] for c in same["checks"]} == dict.fromkeys(
        ("DRF001", "DRF002", "DRF003"), "passed")
    code, bad = drift(faulty)
    assert code == 1, bad["findings"]
    assert any(f["check"] == "DRF001" and f["severity"] == "error" for f in bad["findings"])
