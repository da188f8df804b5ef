"""LRA001 locates an unreadable adapter at the file that is at fault: a pickle-only adapter at
adapter_model.bin (the file present), not at the adapter_model.safetensors it lacks."""
from __future__ import annotations

import json

import pytest

from llmdoctor.runner import run_checks
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
    assert finding.location.file.endswith(f"adapter/{pickled}")
