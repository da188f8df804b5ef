"""Hostile quantized directories: seeded junk in quantization_config (bits, group_size, formats, ignore lists)
and in the stored tensors (cut, retyped, reshaped, dropped) gets findings, never a crashed check or an
exception; nothing is written into the model directory."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes
from tests.checks.zoo_quant import quantize_dir

SELECT = ["QNT", "files", "config", "weights"]
CASES = 24
JUNK = [10 ** 9, -1, 0, 3, 7, 1.5, "4", None, True, [], {}, [[4]], {"a": 1}, "", 2 ** 63, float("nan")]
KEYS = {"gptq": ["bits", "group_size", "checkpoint_format", "desc_act", "sym", "lm_head", "dynamic",
                 "modules_to_not_convert"],
        "ct_w4a16": ["format", "config_groups", "ignore", "kv_cache_scheme"],
        "fp8_block": ["weight_block_size", "modules_to_not_convert"],
        "awq": ["bits", "group_size", "version", "zero_point", "modules_to_not_convert"]}


def mutate_config(d: Path, rng: random.Random) -> str:
    config = json.loads((d / "config.json").read_text())
    qc = config["quantization_config"]
    fmt = next(f for f in KEYS if _is(qc, f))
    key = rng.choice(KEYS[fmt])
    if key == "config_groups" and rng.random() < 0.5:
        weights = qc["config_groups"]["group_0"]["weights"]
        sub = rng.choice(["num_bits", "group_size", "strategy", "block_structure"])
        weights[sub] = rng.choice(JUNK)
        what = f"config_groups.weights.{sub}={weights[sub]!r}"
    else:
        qc[key] = rng.choice(JUNK)
        what = f"{key}={qc[key]!r}"
    (d / "config.json").write_text(json.dumps(config, allow_nan=True))
    return what


def _is(qc: dict, fmt: str) -> bool:
    method = qc.get("quant_method")
    return {"gptq": "gptq", "ct_w4a16": "compressed-tensors", "fp8_block": "fp8", "awq": "awq"}[fmt] == method


def mutate_tensors(d: Path, rng: random.Random) -> str:
    tensors = load_file(str(d / "model.safetensors"))
    quantized = [n for n in tensors if not n.endswith((".weight", "weight_shape")) or tensors[n].dtype not in (
        torch.float32, torch.float16)]
    name = rng.choice(quantized)
    t = tensors[name]
    how = rng.choice(["cut", "retype", "reshape", "drop", "empty"])
    if how == "cut" and t.dim() and t.shape[0] > 1:
        tensors[name] = t[: t.shape[0] // 2]
    elif how == "retype":
        tensors[name] = t.view(torch.uint8) if t.element_size() > 1 else t.to(torch.int32)
    elif how == "reshape" and t.dim() == 2:
        tensors[name] = t.t()
    elif how == "empty":
        tensors[name] = t.flatten()[:0]
    else:
        tensors.pop(name)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"))
    return f"{name}: {how}"


@pytest.fixture(scope="module")
def healthy(tmp_path_factory, factory_model_dir):
    root = tmp_path_factory.mktemp("quant-fuzz")
    return {fmt: quantize_dir(factory_model_dir("llama"), root / fmt, fmt) for fmt in KEYS}


def test_hostile_quantized_dirs_get_findings_not_crashes(healthy, tmp_path):
    rng = random.Random(23)
    fired = set()
    for case in range(CASES):
        fmt = rng.choice(list(KEYS))
        d = tmp_path / f"case{case}"
        shutil.copytree(healthy[fmt], d)
        what = [mutate_config(d, rng) if rng.random() < 0.5 else mutate_tensors(d, rng)
                for _ in range(rng.randint(1, 2))]
        report = run_checks(d, select=SELECT, device="cpu")
        try:
            no_crashes(report)
        except AssertionError as e:
            raise AssertionError(f"{fmt} {what}: {e}") from None
        fired |= {f.check for f in report.findings if f.check.startswith("QNT") and f.severity.value != "info"}
    assert len(fired) >= 4, fired


def test_cli_reports_a_broken_quantized_dir_without_a_traceback(healthy, tmp_path):
    import subprocess
    import sys
    d = tmp_path / "model"
    shutil.copytree(healthy["gptq"], d)
    tensors = load_file(str(d / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.qweight"
    tensors[name] = tensors[name][:3]
    save_file(tensors, str(d / "model.safetensors"))
    before = sorted((p.name, p.stat().st_mtime_ns) for p in d.iterdir())
    out = subprocess.run([sys.executable, "-m", "llmdoctor", "check", str(d), "--select", "QNT,files,weights",
                          "--format", "json", "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert any(f["check"] == "QNT002" and name in f["message"] for f in report["findings"])
    assert sorted((p.name, p.stat().st_mtime_ns) for p in d.iterdir()) == before
