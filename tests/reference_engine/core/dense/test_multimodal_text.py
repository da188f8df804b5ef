"""Multimodal checkpoints of a decoder the engine runs (Gemma 3, Mistral 3, Qwen2.5-VL, Qwen3-VL, Llama 4): the
engine runs their text decoder from the wrapper's own files, and its logits equal transformers' multimodal class run
on text alone (fp32, 1e-4). The vision tower is in the files but never read by the engine; the static checks still
see it; `llmdoctor check` runs clean on each. A sparse text_config (what real Gemma 3 4B-27B configs hold) means
the same model as the full one."""
from __future__ import annotations

import json

import pytest
import torch
import transformers

from reference_engine.config import load_config
from tests.checks.conftest import no_crashes, problems
from reference_engine.core.engine import CoreEngine


TEXT = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, initializer_range=0.1)
SIGLIP = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
              patch_size=14)
PIXTRAL = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
               patch_size=14, head_dim=8)
QWEN_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=14,
                   spatial_merge_size=1, temporal_patch_size=1)


def gemma3():
    cfg = transformers.Gemma3Config(
        text_config={**TEXT, "sliding_window": 6, "layer_types": ["sliding_attention", "full_attention"],
                     "query_pre_attn_scalar": 8}, vision_config=SIGLIP, mm_tokens_per_image=4)
    return transformers.Gemma3ForConditionalGeneration(cfg)


def mistral3():
    cfg = transformers.Mistral3Config(text_config={**TEXT, "model_type": "mistral", "sliding_window": None},
                                      vision_config={**PIXTRAL, "model_type": "pixtral"})
    return transformers.Mistral3ForConditionalGeneration(cfg)


def qwen2_5_vl():
    cfg = transformers.Qwen2_5_VLConfig(
        text_config={**TEXT, "rope_parameters": {"rope_type": "default", "mrope_section": [1, 1, 2],
                                                 "rope_theta": 10000.0}},
        vision_config={**QWEN_VISION, "fullatt_block_indexes": [0], "window_size": 28})
    return transformers.Qwen2_5_VLForConditionalGeneration(cfg)


def qwen3_vl():
    cfg = transformers.Qwen3VLConfig(
        text_config={**TEXT, "rope_parameters": {"rope_type": "default", "mrope_section": [1, 1, 2],
                                                 "mrope_interleaved": True, "rope_theta": 10000.0}},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
                       "out_hidden_size": 32, "patch_size": 14, "spatial_merge_size": 1, "temporal_patch_size": 1,
                       "deepstack_visual_indexes": [0], "num_position_embeddings": 4})
    return transformers.Qwen3VLForConditionalGeneration(cfg)


def llama4():
    """Llama4ForConditionalGeneration: its text decoder has chunked attention (chunks of 16), NoPE layers and an
    interleaved MoE (tests/reference_engine/core/tiny_families.py's variant)."""
    from tests.reference_engine.core.tiny_families import NOPE_ROUTED
    text = {**NOPE_ROUTED.base, **NOPE_ROUTED.variants["llama4_chunked_nope_moe"][2], "vocab_size": TEXT["vocab_size"]}
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14, vision_output_dim=32, projector_input_dim=32, projector_output_dim=32)
    return transformers.Llama4ForConditionalGeneration(transformers.Llama4Config(text_config=text,
                                                                                 vision_config=vision))


BUILDERS = {"gemma3": gemma3, "mistral3": mistral3, "qwen2_5_vl": qwen2_5_vl, "qwen3_vl": qwen3_vl, "llama4": llama4}


def build(out, name: str, at_init: bool = False):
    """at_init: norms and biases as transformers initialises them (a model the checks judge untrained, so its
    random babble is information, not a warning); else randomised so that a norm or bias bug shows."""
    torch.manual_seed(0)
    model = BUILDERS[name]()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "projector" in pname and p.dim() == 2 and not p.any():   # Gemma 3's zero-initialised
                p.normal_(0.0, 0.02)                                      # projection (WGT006 says so)
            elif at_init:
                continue
            elif "norm" in pname:   # not transformers' 1s and 0s: a norm or offset bug must show
                p.uniform_(-0.5, 0.5) if name == "gemma3" else p.uniform_(0.5, 1.5)
            elif pname.endswith("bias"):
                p.normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)
    return model.eval()


@torch.no_grad()
def oracle_logits(model, ids: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


IDS = [1, 17, 45, 200, 3, 3, 99, 150, 42, 7, 8, 250, 60, 61, 62, 5]


@pytest.mark.parametrize("name", list(BUILDERS))
def test_text_decoder_logits_equal_the_multimodal_class(tmp_path, name):
    """32 tokens: past Gemma 3's window (6) and Llama 4's attention chunk (16)."""
    model = build(tmp_path, name)
    config = load_config(tmp_path)
    assert config.wrapper and config.wrapper.endswith("ForConditionalGeneration")
    engine = CoreEngine.from_pretrained(tmp_path)
    ids = IDS * 2
    torch.testing.assert_close(engine.logits(ids), oracle_logits(model, ids), atol=1e-4, rtol=1e-4)


def test_sparse_gemma3_text_config_means_the_class_defaults(tmp_path):
    """Real Gemma 3 configs name only what differs from Gemma3TextConfig: rope_theta 1e6, heads 8/4 ... are the
    class's, not the engine's generic defaults."""
    full = dict(TEXT, num_attention_heads=8, num_key_value_heads=4, head_dim=8, hidden_size=32,
                sliding_window=6, layer_types=["sliding_attention", "full_attention"])
    cfg = transformers.Gemma3Config(text_config=full, vision_config=SIGLIP, mm_tokens_per_image=4)
    torch.manual_seed(1)
    model = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    model.save_pretrained(tmp_path, safe_serialization=True)
    raw = json.loads((tmp_path / "config.json").read_text())
    defaults = transformers.Gemma3TextConfig().to_dict()
    sparse = {k: v for k, v in raw["text_config"].items()
              if k in ("model_type", "layer_types") or defaults.get(k) != v}
    for dropped in ("rope_parameters", "num_attention_heads", "num_key_value_heads", "rms_norm_eps"):
        assert dropped not in sparse or dropped == "rope_parameters"
    sparse.pop("rope_parameters", None)                     # as 4.50-era configs: no rope block at all
    raw["text_config"] = sparse
    (tmp_path / "config.json").write_text(json.dumps(raw))
    reread = transformers.AutoConfig.from_pretrained(tmp_path).text_config
    assert reread.rope_parameters["full_attention"]["rope_theta"] == 1_000_000.0
    engine = CoreEngine.from_pretrained(tmp_path)
    torch.testing.assert_close(engine.logits(IDS), oracle_logits(model, IDS), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_check_runs_the_engine_checks_on_the_text_decoder(tmp_path, name, monkeypatch):
    """`llmdoctor check --quick` on a healthy multimodal checkpoint (every wrapper: Gemma 3, Mistral 3, Qwen2.5-VL,
    Qwen3-VL, Llama 4) at transformers' initialisation: the engine checks run on the text decoder (not
    "unsupported architecture"), no warning or error; the vision tower's tensors are still scanned by the weight
    checks; the competence family measures the decoder and names it untrained (info), the vision side left out
    of that judgement."""
    from llmdoctor.run.runner import run_checks
    from reference_engine.testing.factory import TOKENIZER_VOCAB, add_tokenizer
    from tests.checks.conftest import competence_standing
    monkeypatch.setitem(TEXT, "vocab_size", TOKENIZER_VOCAB)
    build(tmp_path, name, at_init=True)
    add_tokenizer(tmp_path)
    report = run_checks(tmp_path, quick=True, device="cpu")
    no_crashes(report)
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"WGT001", "GLD002", "ACT001", "ENG001"} <= ran
    assert problems(report) == []
    assert competence_standing(report) == "untrained"


def test_streamed_text_decoder_equals_the_resident_one(tmp_path):
    """Layer-by-layer streaming (what --memory-budget runs) reads the same renamed tensors."""
    from reference_engine.streaming.streaming_core import StreamingCore
    build(tmp_path, "qwen2_5_vl")
    resident = CoreEngine.from_pretrained(tmp_path).logits(IDS)
    streamed = StreamingCore.from_pretrained(tmp_path).logits(IDS)
    torch.testing.assert_close(streamed, resident, atol=1e-5, rtol=1e-5)
