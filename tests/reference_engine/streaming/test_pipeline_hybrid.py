"""A hybrid (Qwen3-Next: Gated DeltaNet layers with their recurrent states beside attention layers) through the
torch.distributed pipeline: 2 ranks give one process's logits, prefill and decode step, and those equal the
resident engine's. (~50 s on a loaded 2-core machine: three processes start.)"""
from __future__ import annotations

import torch
from safetensors.torch import load_file

from reference_engine.core.engine import CoreEngine
from tests.reference_engine.core.qwen3_next_models import model_dir
from tests.reference_engine.streaming.test_pipeline import launch


def test_hybrid_pipeline_matches_one_process_and_the_resident_engine(tmp_path):
    model = model_dir("next_moe_interval")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    assert launch(1, model, one) == [0] and launch(2, model, two) == [0, 0]
    want = load_file(one / "rank0.safetensors")
    for rank in (0, 1):
        got = load_file(two / f"rank{rank}.safetensors")
        for name, tensor in want.items():
            assert (got[name] - tensor).abs().max().item() < 1e-5, (rank, name)
    resident = CoreEngine.from_pretrained(model, num_blocks=64)
    assert (resident.logits(list(range(3, 30))) - want["full"]).abs().max().item() < 1e-5
    assert torch.isfinite(want["step"]).all()
