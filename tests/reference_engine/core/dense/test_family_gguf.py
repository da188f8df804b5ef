"""SmolLM3, OLMo 2/3, MiniMax-M2 and Llama 4 text from GGUF: tiny transformers-built models converted by
llama.cpp's own convert_hf_to_gguf.py (--outtype f32; SmolLM2's tokenizer rides along, the converter needs a
pre-tokenizer it knows) give the engine the same logits as their safetensors directories, and transformers'.

What the pinned converter writes: smollm3 (no NoPE list: llama.cpp hard-codes one NoPE layer in four, so the
model here keeps that default), olmo2 for OLMo 2 and OLMo 3 (OLMo 3's window and per-layer pattern, its YaRN for
the full layers), minimax-m2 (experts stacked [experts, rows, cols], read back one expert at a time), llama4
(experts stacked and split gate/up: fused and transposed back; no chunk size, temperature or NoPE list in the
metadata: llama.cpp hard-codes 8192 / 8192, 0.1 / one in four, so the model here uses those). Each conversion
takes 15-35 s on 2 cores (seven here: the module runs ~3 minutes on a busy machine; six tests over 10 s each)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from reference_engine.core import CoreEngine
from reference_engine.files.gguf_config import load_gguf_config
from reference_engine.files.gguf_weights import GGUFWeights
from tests import assets, assets_gguf
from tests.conftest import _asset
from tests.hf_models import hf_logits
from tests.reference_engine.core.gguf_family_runs import check_is_clean, ragged_batch_equals_alone
from tests.reference_engine.core.tiny_models import build, load_hf
from tests.reference_engine.core.transformers_parity import TOL

# variant -> extra config for the GGUF round trip
MODELS = {"olmo2_post_norm": {}, "olmo3_windows_yarn": {}, "smollm3_nope_gqa": {"no_rope_layers": None},
          "minimax_m2_partial_rotary": {},
          # llama.cpp hard-codes Llama 4's chunk, temperature and NoPE step: a model with those values
          "llama4_chunked_nope_moe": {"attention_chunk_size": 8192, "floor_scale": 8192, "attn_scale": 0.1,
                                      "no_rope_layers": None}}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("family_gguf")
    tok = _asset(assets.smollm2_dir)
    vocab = json.loads((tok / "config.json").read_text())["vocab_size"]

    done: dict = {}

    def convert(variant: str, outtype: str = "f32"):
        if (variant, outtype) in done:
            return done[variant, outtype]
        hf_dir = root / variant
        if not hf_dir.is_dir():
            # no pad id: nn.Embedding would zero that row, token 0 of SmolLM2's vocabulary (EMB001 says so)
            build(hf_dir, variant, seed=4, vocab_size=vocab, hidden_size=64, pad_token_id=None, **MODELS[variant])
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(tok / name, hf_dir / name)
        gguf = _asset(assets_gguf.convert_hf_dir, hf_dir, root / f"{variant}-{outtype}.gguf", outtype)
        done[variant, outtype] = hf_dir, gguf
        return done[variant, outtype]
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


@pytest.mark.assets
def test_quantized_stacked_experts_are_cut_on_expert_boundaries(converted):
    """Q8_0 experts: each expert's slice dequantizes to the F32 file's expert within Q8_0's error (a slice off by
    a block would be another expert's numbers), and the router bias keeps its name."""
    _, f32 = converted("minimax_m2_partial_rotary")
    _, q8 = converted("minimax_m2_partial_rotary", "q8_0")
    exact, quant = GGUFWeights.open(f32), GGUFWeights.open(q8)
    experts = [n for n in exact.names if ".experts." in n]
    assert len(experts) == 2 * 6 * 3 and "model.layers.1.block_sparse_moe.e_score_correction_bias" in exact.names
    # w1/w3 rows (64 wide) are Q8_0 blocks; w2 rows (24 wide) are no whole block and stay F16
    assert {quant.info(n).ggml_type for n in experts} == {"Q8_0", "F16"}
    for name in experts:
        a, b = exact.get(name), quant.get(name)
        assert a.shape == b.shape and (a - b).abs().max() <= 0.01 * a.abs().max()


@pytest.mark.assets
@pytest.mark.parametrize("variant", ["minimax_m2_partial_rotary", "llama4_chunked_nope_moe"])
def test_streaming_core_reads_the_expert_tensors_too(converted, variant):
    """The layer-at-a-time reader (readers/gguf_reader.py) goes through the same per-expert slices (MiniMax-M2)
    and fused transposed experts (Llama 4)."""
    from reference_engine.engine import Engine
    hf_dir, path = converted(variant)
    ids = torch.randint(3, 49000, (60,), generator=torch.Generator().manual_seed(1)).tolist()
    streamed = Engine.from_pretrained(path, streaming=True).logits(ids)
    # streaming reads the head in row blocks: BLAS may pick another kernel for that shape on another CPU
    torch.testing.assert_close(streamed, CoreEngine.from_pretrained(hf_dir).logits(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.assets
@pytest.mark.parametrize("variant", sorted(MODELS))
def test_ragged_batch_from_the_gguf_equals_each_sequence_alone(converted, variant):
    hf_dir, path = converted(variant)
    ragged_batch_equals_alone(path, hf_dir)


@pytest.mark.assets
@pytest.mark.parametrize("variant", sorted(set(MODELS) - {"olmo2_post_norm"}))   # one run per GGUF architecture
def test_check_on_the_gguf_is_clean(converted, variant):
    # random weights may babble in loops: GEN002's warning on the SmolLM3 draw (as on some hybrids)
    check_is_clean(converted(variant)[1], frozenset({"GEN002"}) if variant.startswith("smollm3") else frozenset())
