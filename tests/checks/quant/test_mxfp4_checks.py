"""MXFP4 (gpt-oss experts): a healthy checkpoint passes every static, QNT and engine check; each broken copy
fires its QNT check (QNT020 shapes, QNT021 coverage, QNT022 scale range) at a located key or tensor."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import STATIC_CATEGORIES, fired, no_crashes, problems
from tests.checks.zoo_engine import ENGINE_CATEGORIES
from tests.reference_engine.core.mxfp4_copies import mxfp4_copy

GU0 = "model.layers.0.mlp.experts.gate_up_proj"


@dataclass(frozen=True)
class MxFault:
    name: str
    apply: Callable[[Path], None]
    check: str
    severity: str = "error"
    anchor: str = ""


def edit_tensors(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        tensors = load_file(str(d / "model.safetensors"))
        change(tensors)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"),
                  metadata={"format": "pt"})
    return apply


def edit_qc(**updates) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        config["quantization_config"].update(updates)
        (d / "config.json").write_text(json.dumps(config, indent=2))
    return apply


def transposed_blocks(t: dict) -> None:
    """Blocks and scales written for [experts, in, out] instead of [experts, out, in] (consistent with each
    other, so only the config's shapes tell)."""
    blocks = t[GU0 + "_blocks"]
    e, out, g, _ = blocks.shape
    inp = g * 32
    t[GU0 + "_blocks"] = blocks.reshape(e, inp, out // 32, 16)
    t[GU0 + "_scales"] = t[GU0 + "_scales"].reshape(e, inp, out // 32)


def attention_quantized(t: dict) -> None:
    q = "model.layers.1.self_attn.q_proj"
    w = t.pop(q + ".weight")                                             # [out, in]
    t[q + ".weight_blocks"] = torch.zeros(w.shape[0], w.shape[1] // 32, 16, dtype=torch.uint8)
    t[q + ".weight_scales"] = torch.full((w.shape[0], w.shape[1] // 32), 127, dtype=torch.uint8)


def one_layer_float(t: dict) -> None:
    from reference_engine.files.quant.mxfp4 import dequantize
    d = "model.layers.1.mlp.experts.down_proj"
    t[d] = dequantize(t.pop(d + "_blocks"), t.pop(d + "_scales")).transpose(1, 2).contiguous()


def set_scales(fn) -> Callable[[dict], None]:
    def change(t: dict) -> None:
        t[GU0 + "_scales"] = fn(t[GU0 + "_scales"].long()).to(torch.uint8)
    return change


FAULTS = [
    MxFault("mxfp4_blocks_transposed", edit_tensors(transposed_blocks), "QNT020"),
    MxFault("mxfp4_scales_dropped", edit_tensors(lambda t: t.pop(GU0 + "_scales")), "QNT020"),
    MxFault("mxfp4_attention_quantized", edit_tensors(attention_quantized), "QNT021", anchor="llama.cpp#16756"),
    MxFault("mxfp4_one_expert_tensor_float", edit_tensors(one_layer_float), "QNT021"),
    MxFault("mxfp4_experts_not_converted", edit_qc(modules_to_not_convert=["model.layers.*.mlp.experts"]),
            "QNT021"),
    MxFault("mxfp4_scales_without_bias", edit_tensors(set_scales(lambda s: (s - 127) % 256)), "QNT022"),
    MxFault("mxfp4_nan_scale", edit_tensors(set_scales(lambda s: s.index_fill(0, torch.tensor([1]), 255))),
            "QNT022"),
]


@pytest.fixture(scope="module")
def mxfp4_model(factory_model_dir, tmp_path_factory) -> Path:
    """The factory gpt-oss (tokenizer and all) with its experts stored as MXFP4; read-only."""
    return mxfp4_copy(factory_model_dir("gpt_oss"), tmp_path_factory.mktemp("mxfp4") / "model")


def test_healthy_mxfp4_model_passes_static_qnt_and_engine_checks(mxfp4_model):
    report = run_checks(mxfp4_model, select=STATIC_CATEGORIES + ENGINE_CATEGORIES + ["QNT"], quick=True,
                        device="cpu")
    no_crashes(report)
    assert problems(report) == []
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"QNT020", "QNT021", "QNT022", "CFG010", "CFG013", "GLD002", "ENG001", "MOE003"} <= ran


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_mxfp4_fault_fires_its_check(fault, mxfp4_model, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(mxfp4_model, d)
    fault.apply(d)
    report = run_checks(d, select=["QNT"])
    no_crashes(report)
    assert f"{fault.check}:{fault.severity}" in fired(report), (fault.name, fired(report))
    hit = next(f for f in report.findings if f.check == fault.check)
    assert hit.location is not None and hit.location.logical, hit


def test_all_float_experts_under_an_mxfp4_declaration_is_a_warning(factory_model_dir, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(factory_model_dir("gpt_oss"), d)
    config = json.loads((d / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4"}
    (d / "config.json").write_text(json.dumps(config))
    assert "QNT021:warning" in fired(run_checks(d, select=["QNT"]))
