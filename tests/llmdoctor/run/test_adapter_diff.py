"""`llmdoctor diff` with LoRA adapters: BASE vs ADAPTER shows the adapter's effect by layer and module;
MERGED vs ADAPTER --base BASE is ~0 KLD for a right merge and names the first wrong layer for a wrong one
(wrong scaling, only half the layers, a lossy dtype). Nothing is written into any directory."""
from __future__ import annotations

import copy
import shutil

import pytest
import torch

from llmdoctor.run.diff_runner import run_diff
from reference_engine.testing.factory import build_model_dir
from tests.peft_adapters import make_adapter

import peft  # noqa: E402,F401  (the oracle: scripts/setup.sh --test installs it; never a skip)
LAYERS = 4
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    base = build_model_dir(root / "base", "llama", seed=0, num_hidden_layers=LAYERS)
    adapter, peft_model = make_adapter(base, root / "adapter", target_modules=["q_proj", "v_proj", "down_proj"])
    return root, base, adapter, peft_model


def export_merged(peft_model, base, out, *, scale=1.0, layers=None, dtype=torch.float32):
    """merge_and_unload() as a user would export it, optionally wrong: scaling multiplied by `scale`, merged only
    into `layers`, or saved in a lossy dtype."""
    from peft.tuners.lora import LoraLayer
    model = copy.deepcopy(peft_model)
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            layer = int(name.split(".layers.")[1].split(".")[0])
            keep = layers is None or layer in layers
            module.scaling["default"] = module.scaling["default"] * scale if keep else 0.0
    merged = model.merge_and_unload().to(dtype)
    merged.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copy(base / name, out / name)
    return out


def run(ref, cand, base=None):
    return run_diff(ref, cand, quick=True, base=base, select=["DIF030", "DIF040", "DIF020"])


def finding(report, check):
    return [f for f in report.findings if f.check == check]


def test_base_vs_adapter_shows_the_effect_by_layer_and_module(pair, dir_snapshot):
    root, base, adapter, _ = pair
    before = (dir_snapshot(base), dir_snapshot(adapter))
    report = run(base, adapter)
    assert {r.status for r in report.checks} <= {"passed", "failed"}, [(r.id, r.reason) for r in report.checks]
    changed = {f.evidence["tensor"] for f in finding(report, "DIF020") if "tensor" in f.evidence}
    assert any("q_proj" in t for t in changed) and any("down_proj" in t for t in changed)
    assert not any("k_proj" in t or "gate_proj" in t for t in changed)     # untouched modules are identical
    assert finding(report, "DIF030")[0].evidence["kld_mean"] > 1e-4
    assert "layer 0" in finding(report, "DIF040")[0].message
    assert (dir_snapshot(base), dir_snapshot(adapter)) == before


def test_right_merge_is_zero_kld(pair):
    root, base, adapter, peft_model = pair
    merged = export_merged(peft_model, base, root / "merged_ok")
    report = run(merged, adapter, base=base)
    kld = finding(report, "DIF030")[0]
    assert kld.severity.value == "info" and kld.evidence["kld_mean"] < 1e-9
    assert all(f.severity.value == "info" for f in report.findings), [f.message for f in report.findings]


@pytest.mark.parametrize("wrong,first_layer", [(dict(scale=2.0), 0), (dict(layers={0, 1}), 2)],
                         ids=["double_scaling", "half_the_layers"])
def test_wrong_merge_names_the_first_wrong_layer(pair, wrong, first_layer):
    root, base, adapter, peft_model = pair
    merged = export_merged(peft_model, base, root / f"merged_{first_layer}", **wrong)
    report = run(merged, adapter, base=base)
    assert finding(report, "DIF030")[0].evidence["kld_mean"] > 1e-6
    where = finding(report, "DIF040")[0]
    assert where.severity.value == "warning" and f"at layer {first_layer} " in where.message, where.message
    wrong_tensors = sorted(f.evidence["tensor"] for f in finding(report, "DIF020") if "tensor" in f.evidence)
    assert wrong_tensors and all(f"layers.{first_layer}." in t or int(t.split(".")[1]) > first_layer
                                 for t in wrong_tensors), wrong_tensors


def test_lossy_dtype_merge_differs_from_layer_0(pair):
    """Exported in bfloat16: every tensor is rounded (NMSE ~-55 dB, below DIF020's warning) and the KLD is no
    longer 0; DIF040 names the largest own error, DIF020 counts every tensor from layer 0 on as changed."""
    root, base, adapter, peft_model = pair
    merged = export_merged(peft_model, base, root / "merged_bf16", dtype=torch.bfloat16)
    report = run(merged, adapter, base=base)
    assert finding(report, "DIF030")[0].evidence["kld_mean"] > 1e-9
    assert "bit-identical" not in finding(report, "DIF040")[0].message
    summary = finding(report, "DIF020")[0]
    assert "39 of 39 matched tensors differ" in summary.message, summary.message


def test_adapter_side_that_cannot_build_fails_loudly(pair, tmp_path):
    root, base, adapter, _ = pair
    broken = tmp_path / "broken"
    shutil.copytree(adapter, broken)
    data = (broken / "adapter_model.safetensors").read_bytes()
    (broken / "adapter_model.safetensors").write_bytes(data[:100])
    report = run(base, broken)
    assert report.exit_code() == 1
    assert any("could not compare" in f.message for f in report.findings)
