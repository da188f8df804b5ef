"""Base + LoRA adapter through our own merge vs peft: fp32 logits within 1e-4 of the nearer of the PeftModel
forward and its merge_and_unload(), for every adapter variant peft makes; and the adapter must matter."""
from __future__ import annotations

import pytest
import torch

from reference_engine.engine import Engine
from reference_engine.testing.factory import build_model_dir
from tests.peft_adapters import make_adapter, nearer_gap, peft_logits

import peft  # noqa: E402,F401  (the oracle: scripts/setup.sh --test installs it; never a skip)

IDS = [1, 40, 77, 300, 12, 5, 99, 511, 7]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VARIANTS = {
    "attention_and_mlp": dict(target_modules=ALL_LINEAR),
    "rslora": dict(target_modules=["q_proj", "v_proj"], use_rslora=True, r=8, lora_alpha=16),
    "rank_alpha_pattern": dict(target_modules=["q_proj", "v_proj", "down_proj"],
                               rank_pattern={"v_proj": 2, r"layers\.1\.self_attn\.q_proj": 6},
                               alpha_pattern={"down_proj": 3}),
    "layers_to_transform": dict(target_modules=["q_proj", "up_proj"], layers_to_transform=[0, 2]),
    "dora": dict(target_modules=["q_proj", "v_proj", "down_proj"], use_dora=True),
    "modules_to_save_resized": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens", "lm_head"],
                                    added_tokens=["<tool>", "<think>", "</think>"]),
    "trainable_token_indices": dict(target_modules=["q_proj"], trainable_token_indices=[1, 5, 300]),
    "lora_on_embeddings": dict(target_modules=["q_proj", "embed_tokens", "lm_head"]),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return build_model_dir(tmp_path_factory.mktemp("base"), "llama", seed=0, num_hidden_layers=3)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_adapted_logits_match_peft(base, tmp_path, variant):
    kw = dict(VARIANTS[variant])
    adapter, peft_model = make_adapter(base, tmp_path / variant, **kw)
    ids = IDS + ([512, 513, 514] if "added_tokens" in kw else [])
    engine = Engine.from_pretrained(base, adapter=adapter)
    ours = engine.logits(ids)
    unmerged, merged = peft_logits(peft_model, ids)
    assert ours.shape == merged.shape
    gap = nearer_gap(ours, (unmerged, merged))
    assert gap < 1e-4, f"{variant}: {gap:.2e} from peft"
    if "added_tokens" not in kw:
        plain = Engine.from_pretrained(base).logits(ids)
        assert float((plain - ours).abs().max()) > 1e-3, "the adapter changed nothing"
    else:
        assert engine.config.vocab_size == 515 and len(engine.tokenizer) == 515


def test_streaming_reads_the_same_adapted_weights(base, tmp_path):
    adapter, _ = make_adapter(base, tmp_path / "a", target_modules=["q_proj", "down_proj", "lm_head"],
                              modules_to_save=["embed_tokens"], added_tokens=["<x>"], use_dora=False)
    ids = IDS + [512]
    resident = Engine.from_pretrained(base, adapter=adapter).logits(ids)
    streamed = Engine.from_pretrained(base, adapter=adapter, streaming=True).logits(ids)
    assert torch.allclose(resident, streamed, atol=1e-5)
    from reference_engine.budget.model_sizes import model_sizes
    assert model_sizes(base, adapter).config.vocab_size == 513       # the memory plan sees the adapted vocabulary


def test_dtype_bfloat16_runs(base, tmp_path):
    adapter, peft_model = make_adapter(base, tmp_path / "a", target_modules=["q_proj", "v_proj"])
    ours = Engine.from_pretrained(base, adapter=adapter, dtype="bfloat16").logits(IDS)
    _, merged = peft_logits(peft_model, IDS)
    assert float((ours - merged).abs().max()) < 0.1


TIED_VARIANTS = {
    "trainable_tokens": dict(target_modules=["q_proj"], trainable_token_indices=[1, 5, 300]),
    "embed_modules_to_save": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens"]),
    "embed_modules_to_save_resized": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens"],
                                          added_tokens=["<tool>", "<x>"]),
    "embed_modules_to_save_tied": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens"],
                                       ensure_weight_tying=True),
    "dora_on_biased_projections": dict(target_modules=["q_proj", "k_proj", "v_proj"], use_dora=True),
}


@pytest.fixture(scope="module")
def tied_base(tmp_path_factory):
    """Qwen2: tied embeddings and biased q/k/v projections."""
    return build_model_dir(tmp_path_factory.mktemp("tied"), "qwen2", seed=2, tie_word_embeddings=True)


@pytest.mark.parametrize("variant", list(TIED_VARIANTS))
def test_tied_base_matches_peft(tied_base, tmp_path, variant):
    """peft keeps a tied LM head on the base's embedding when only embed_tokens is trained (unless
    ensure_weight_tying); trainable tokens stay tied."""
    kw = dict(TIED_VARIANTS[variant])
    adapter, peft_model = make_adapter(tied_base, tmp_path / variant, **kw)
    ids = IDS + ([512, 513] if "added_tokens" in kw else [])
    ours = Engine.from_pretrained(tied_base, adapter=adapter).logits(ids)
    streamed = Engine.from_pretrained(tied_base, adapter=adapter, streaming=True).logits(ids)
    gap = nearer_gap(ours, peft_logits(peft_model, ids))
    assert gap < 1e-4, f"{variant}: {gap:.2e} from peft"
    assert torch.allclose(ours, streamed, atol=1e-5)
