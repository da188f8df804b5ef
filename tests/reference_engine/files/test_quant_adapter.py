"""QLoRA: a LoRA adapter over a quantized base. The engine merges the adapter into the dequantized weights; the
oracle is peft on the base dequantized by the independent implementation (a float model), fp32."""
from __future__ import annotations

import pytest
import torch

from reference_engine.engine import Engine
from reference_engine.testing.factory import build_model_dir
from tests.peft_adapters import make_adapter, peft_logits
from tests.quant_builders import build_variant, float_copy

IDS = list(range(3, 40))


@pytest.mark.parametrize("variant", ["bnb_nf4_dq", "gptq_v2_b4_g64_asym"])
def test_lora_over_a_quantized_base_matches_peft(variant, tmp_path):
    src = build_model_dir(tmp_path / "float", "llama", seed=6, initializer_range=0.06)
    build = build_variant(variant, src, tmp_path / "quant")
    base = float_copy(build, tmp_path / "base")
    adapter, peft_model = make_adapter(base, tmp_path / "adapter", seed=1,
                                       target_modules=["q_proj", "v_proj", "down_proj"])
    unmerged, _ = peft_logits(peft_model, IDS)
    ours = Engine.from_pretrained(build.path, adapter=adapter).logits(IDS)
    assert (ours - unmerged).abs().max().item() <= 1e-4
    streamed = Engine.from_pretrained(build.path, adapter=adapter, streaming=True).logits(IDS)
    assert torch.equal(streamed, ours)   # the same products: layers merged whole, the head in one block (same_sums.py)
    assert (ours - Engine.from_pretrained(build.path).logits(IDS)).abs().max().item() > 1e-3   # the adapter acts
