"""LFM2 from GGUF: a tiny LFM2 (with SmolLM2's tokenizer, which llama.cpp's converter recognises) converted by the
pinned convert_hf_to_gguf.py to F32 gives the safetensors logits exactly (per-layer head_count_kv -> layer_types,
shortconv taps [C, K] -> [C, 1, K], token_embd_norm -> model.embedding_norm). Granite 4 (granitehybrid):
test_granite_gguf.py. ~25 s on a loaded 2-core machine: the converter runs once."""
from __future__ import annotations

import shutil

import pytest
import torch

from reference_engine.core import CoreEngine
from tests.assets import AssetError, smollm2_dir
from tests.assets_gguf import convert_hf_dir
from tests.reference_engine.core.hybrid_models import BASE, VARIANTS, random_ids, shape_dynamics


@pytest.fixture(scope="module")
def lfm2_pair(tmp_path_factory):
    import transformers
    try:
        tokenizer_dir = smollm2_dir()
    except AssetError as e:
        pytest.skip(f"SmolLM2 tokenizer asset unavailable: {e}")
    out = tmp_path_factory.mktemp("lfm2") / "hf"
    config_cls, model_cls, overrides = VARIANTS["lfm2_conv3_attn1"]
    config = getattr(transformers, config_cls)(**{**BASE, **overrides, "vocab_size": 49152, "bos_token_id": 1,
                                                  "eos_token_id": 2, "pad_token_id": 2})
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            shape_dynamics(name, param)
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    return out, convert_hf_dir(out, out.parent / "lfm2-f32.gguf")


def test_lfm2_gguf_logits_equal_safetensors(lfm2_pair):
    hf_dir, gguf = lfm2_pair
    ours, theirs = CoreEngine.from_pretrained(gguf), CoreEngine.from_pretrained(hf_dir)
    assert ours.config.raw["layer_types"] == ["conv", "full_attention", "conv", "conv"]
    ids = [i * 613 % 49000 + 100 for i in random_ids(60, seed=5)]
    assert (ours.logits(ids) - theirs.logits(ids)).abs().max().item() <= 1e-5
    with ours.scratch() as (seq,):                               # chunked through the GGUF engine's states
        ours.prefill([seq], [ids[:25]])
        last = ours.prefill([seq], [ids[25:]])
    assert (last[0] - theirs.logits(ids)[-1]).abs().max().item() <= 1e-4
