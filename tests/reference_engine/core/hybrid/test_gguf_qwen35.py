"""Qwen3.5 from GGUF: tiny transformers-built models converted by llama.cpp's own convert_hf_to_gguf.py (the
pinned sdist, F32, --no-mtp) give the same logits as their safetensors directory, and transformers' within 1e-4:
the converter's A = -exp(A_log), 1 + w norms, [C, K] conv and (with more value than key heads) tiled value
heads are all undone (reference_engine/files/gguf_linear_attn.py). Qwen3-Next and Qwen3.5-MoE GGUF files
(stacked experts, Qwen3-Next's q/k/v/z split in two tensors): test_gguf_qwen3_next.py. This model's value
heads (12) are larger than its key heads (8), which llama.cpp's loader cannot size: GGF030 says so."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core import CoreEngine
from tests import assets, assets_gguf
from tests.conftest import _asset
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_models import build

pytestmark = pytest.mark.assets


def test_converted_gguf_equals_the_safetensors_model(tmp_path):
    """~40 s on a loaded 2-core machine (the converter runs in a subprocess)."""
    variant = "qwen35_dense_value_groups"                # 6 value heads over 2 key heads: tiled in the file
    hf_dir = build(tmp_path / "hf", variant, tokenizer_dir=_asset(assets.smollm2_dir))
    path = _asset(assets_gguf.convert_hf_dir, hf_dir, tmp_path / "model.gguf", "f32", None, ("--no-mtp",))
    ours, ref = CoreEngine.from_pretrained(path), CoreEngine.from_pretrained(hf_dir)
    assert ours.config.raw["layer_types"] == ref.config.raw["layer_types"]
    ids = torch.randint(3, 49152, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    a, b = ours.logits(ids), ref.logits(ids)
    assert (a - b).abs().max().item() <= 1e-6
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    assert (a - hf_logits(hf, ids)).abs().max().item() <= 1e-4
    with ours.scratch() as (s,):                                  # and decode steps from the GGUF weights
        ours.prefill([s], [ids[:100]])
        steps = torch.stack([ours.decode([s], [t])[0] for t in ids[100:110]])
    assert (steps - b[100:110]).abs().max().item() <= 1e-4
    from reference_engine.streaming.streaming_core import StreamingCore
    streamed = StreamingCore.from_pretrained(path).logits(ids)          # one layer at a time, read from the GGUF
    assert (streamed - a).abs().max().item() <= 1e-5
    from tests.reference_engine.core.gguf_family_runs import check_is_clean, ragged_batch_equals_alone
    ragged_batch_equals_alone(path, hf_dir)             # an unequal-length batch: each sequence's DeltaNet state
    # the whole quick check (one conversion, so here): value heads of 12 over keys of 8, llama.cpp cannot load it
    report = check_is_clean(path, frozenset({"GGF030"}))
    found = [f for f in report.findings if f.check == "GGF030"]
    assert len(found) == 1 and found[0].severity.value == "warning" and "value heads of 12" in found[0].message

