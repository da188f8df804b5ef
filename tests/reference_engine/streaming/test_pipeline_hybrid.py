"""One tiny model of each newer family through the torch.distributed pipeline (gloo, CPU, what torchrun starts):
Qwen3-Next (Gated DeltaNet states beside attention), gpt-oss (sinks, windows, clamped SwiGLU experts),
DeepSeek-V3 (MLA latents, group-limited routing), Granite 4 (Mamba2 states), LFM2 (short-conv states), GLM-4.5
(q/k norm, partial rotary, grouped routing), MiniMax-M2 (sigmoid routing with a correction bias), Llama 4 text
(chunked attention, NoPE layers, interleaved MoE), SmolLM3 (NoPE layers) and OLMo 2/3 (post-norm; windows).
2 ranks give one process's logits, prefill and decode step, and those equal the resident engine's; the
bfloat16 lane's captures travel in their own dtype (DeepSeek's router logits stay float32: a gloo size
mismatch before). All eleven models run in one launch of 1 and one of 2 ranks (three processes: 27 s for the
first five, 38 s for all eleven, measured back to back on the shared 2-core machine at load 10, the start-up and
the models' build; each family's test after the first takes ~0.05 s)."""
from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from reference_engine.core.engine import CoreEngine
from tests.reference_engine.core.tiny_models import model_dir
from tests.reference_engine.streaming.test_pipeline import launch

FAMILIES = {
    "qwen3_next": lambda: model_dir("next_moe_interval"),
    "gpt_oss": lambda: model_dir("gpt_oss"),
    "deepseek_v3_mla": lambda: model_dir("dsv3_qlora_yarn_groups"),
    "granite4_mamba2": lambda: model_dir("granite4_moe_rope"),
    "lfm2_short_conv": lambda: model_dir("lfm2_conv3_attn1"),
    "glm4_moe": lambda: model_dir("glm45_qknorm_groups_bias"),
    "minimax_m2": lambda: model_dir("minimax_m2_partial_rotary"),
    "llama4_text": lambda: model_dir("llama4_chunked_nope_moe"),
    "smollm3": lambda: model_dir("smollm3_nope_gqa"),
    "olmo2": lambda: model_dir("olmo2_post_norm"),
    "olmo3": lambda: model_dir("olmo3_windows_yarn"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """family -> (model dir, one-process outputs dir, two-rank outputs dir); one launch per world size."""
    models = [build() for build in FAMILIES.values()]
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    joined = os.pathsep.join(str(m) for m in models)
    assert launch(1, joined, one) == [0] and launch(2, joined, two) == [0, 0]
    return {name: (m, one / str(k), two / str(k)) for k, (name, m) in enumerate(zip(FAMILIES, models))}


@pytest.mark.parametrize("family", FAMILIES)
def test_pipeline_matches_one_process_and_the_resident_engine(family, runs):
    model, one, two = runs[family]
    assert not list(two.glob("error*.txt")), (two / "error0.txt").read_text()
    want = load_file(one / "rank0.safetensors")
    for rank in (0, 1):
        got = load_file(two / f"rank{rank}.safetensors")
        for name, tensor in want.items():
            assert (got[name] - tensor).abs().max().item() < 1e-5, (family, rank, name)
        info, meta = (json.loads((d / f"rank{r}.json").read_text()) for d, r in ((two, rank), (one, 0)))
        for lane in ("records", "low"):       # every layer's captures, float32 and bfloat16 lanes
            assert [r[:2] for r in info[lane]] == [r[:2] for r in meta[lane]], (family, lane)
        assert 0 < info["bytes"] < meta["bytes"]          # each rank read only its own layers (+ embed/head)
    resident = CoreEngine.from_pretrained(model, num_blocks=64)
    assert (resident.logits(list(range(3, 30))) - want["full"]).abs().max().item() < 1e-5
    assert torch.isfinite(want["step"]).all()
