"""Adapter findings are located in the adapter directory: a pickle-only adapter names adapter_model.bin (the
file present, not the adapter_model.safetensors it lacks), anchored, as for model directories, at the text file
that declares it (adapter_config.json line 1) with the file kept in the logical name; a finding about one of
the adapter's tensors points at adapter_model.safetensors, with no line (a binary file) and the tensor as the
logical name."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from llmdoctor.run.runner import run_checks
from reference_engine.testing.factory import build_model_dir


@pytest.mark.parametrize("pickled", ["adapter_model.bin", "adapter_model.pt"])
def test_pickle_only_adapter_is_located_at_the_pickle(tmp_path, pickled):
    base = build_model_dir(tmp_path / "base", num_hidden_layers=1)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"],
        "base_model_name_or_path": str(base)}))
    (adapter / pickled).write_bytes(b"\x80\x04never unpickled")
    report = run_checks(base, adapter=adapter, select=["LRA001"], quick=True)
    [finding] = [f for f in report.findings if f.check == "LRA001"]
    assert finding.severity.value == "error"
    assert pickled in finding.message
    assert finding.location.file.endswith("adapter/adapter_config.json")
    assert finding.location.line == 1 and finding.location.logical == pickled


def test_an_adapter_tensor_points_at_its_safetensors_file(tmp_path):
    base = build_model_dir(tmp_path / "base", num_hidden_layers=1)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"],
        "base_model_name_or_path": str(base)}, indent=2))
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file({f"{prefix}.lora_A.weight": torch.full((4, 64), 0.01),
               f"{prefix}.lora_B.weight": torch.zeros(64, 4)}, str(adapter / "adapter_model.safetensors"))
    report = run_checks(base, adapter=adapter, select=["LRA007"], quick=True)
    [finding] = [f for f in report.findings if f.check == "LRA007"]
    assert finding.location.file.endswith("adapter/adapter_model.safetensors") and finding.location.line is None
    assert finding.location.logical.startswith(prefix)
