"""The issue-38 families from GGUF: tiny transformers-built SmolLM3, OLMo 2 and OLMo 3 models converted by
llama.cpp's own convert_hf_to_gguf.py (--outtype f32; SmolLM2's tokenizer rides along, the converter needs a
pre-tokenizer it knows) give the engine the same logits as their safetensors directories, and transformers'.

What the pinned converter writes: smollm3 (no NoPE list: llama.cpp hard-codes one NoPE layer in four, so the
model here keeps that default), olmo2 for OLMo 2 and OLMo 3 (OLMo 3's window and per-layer pattern, its YaRN for
the full layers), llama4 and minimax-m2 (stacked expert tensors: not mapped by files/gguf_arch.py yet, so the
engine refuses those files by name). Each conversion takes ~15 s on 2 cores (three here, ~60 s in all)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from reference_engine.core import CoreEngine
from reference_engine.files.gguf_config import load_gguf_config
from tests import assets, assets_gguf
from tests.conftest import _asset
from tests.hf_models import hf_logits
from tests.reference_engine.core.family_models import load_hf
from tests.reference_engine.core.issue38_models import TOL, build

# variant -> extra config for the GGUF round trip
MODELS = {"olmo2_post_norm": {}, "olmo3_windows_yarn": {}, "smollm3_nope_gqa": {"no_rope_layers": None}}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("issue38_gguf")
    tok = _asset(assets.smollm2_dir)
    vocab = json.loads((tok / "config.json").read_text())["vocab_size"]

    done: dict = {}

    def convert(variant: str):
        if variant in done:
            return done[variant]
        hf_dir = build(root / variant, variant, seed=4, vocab_size=vocab, hidden_size=64, **MODELS[variant])
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tok / name, hf_dir / name)
        done[variant] = hf_dir, _asset(assets_gguf.convert_hf_dir, hf_dir, root / f"{variant}.gguf", "f32")
        return done[variant]
    return convert


@pytest.mark.assets
@pytest.mark.parametrize("variant", sorted(MODELS))
def test_gguf_logits_equal_the_safetensors_model(converted, variant):
    hf_dir, path = converted(variant)
    from_gguf, from_hf = CoreEngine.from_pretrained(path), CoreEngine.from_pretrained(hf_dir)
    assert from_gguf.config.architecture == from_hf.config.architecture
    assert from_gguf.windows == from_hf.windows
    assert from_gguf.config.family.settings == from_hf.config.family.settings
    ids = torch.randint(3, 49000, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    ours, ref = from_gguf.logits(ids), from_hf.logits(ids)
    diff = (ours - ref).abs().max().item()
    print(f"\n{variant} GGUF vs safetensors: max |logit diff| {diff:.2e}")
    assert diff <= TOL and (ours - hf_logits(load_hf(hf_dir), ids)).abs().max().item() <= TOL


@pytest.mark.assets
def test_olmo3_gguf_keeps_its_layer_kinds_and_full_layer_yarn(converted):
    _, path = converted("olmo3_windows_yarn")
    raw = load_gguf_config(path).raw
    assert raw["layer_types"] == ["sliding_attention"] * 3 + ["full_attention"]
    assert raw["rope_parameters"]["full_attention"]["rope_type"] == "yarn"
    assert raw["rope_parameters"]["sliding_attention"]["rope_type"] == "default"
