"""Factory model directories are complete, consistent, deterministic, and load in transformers as they are."""
from __future__ import annotations

import json

import pytest
import torch

from reference_engine.config import load_config
from reference_engine.testing.factory import BOS, IM_END, PAD, PRESETS, build_model_dir, weight_shapes
from reference_engine.files.weights import Weights

FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json"}


def load_hf(model):
    """The transformers model; fails when HF would silently re-initialise a missing tensor or drop an extra one."""
    from transformers import AutoModelForCausalLM

    hf, info = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return hf


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_transformers_loads_the_preset_with_exactly_our_tensors(factory_model_dir, preset):
    model = factory_model_dir(preset)
    assert {p.name for p in model.iterdir()} == FILES
    hf = load_hf(model)     # asserts no missing/unexpected/mismatched keys in the files
    state, weights = hf.state_dict(), Weights.open(model)
    names = set(weights.names)
    if preset in ("mixtral", "qwen2_moe", "minimax_m2", "deepseek_v2", "deepseek_v3", "glm4_moe"):   # transformers 5
        # renames/fuses routers and experts
        moe = (".experts.", ".mlp.gate.", ".block_sparse_moe.", ".mlp.e_score_correction_bias")
        state = {n: t for n, t in state.items() if not any(m in n for m in moe)}
        names = {n for n in names if not any(m in n for m in moe)}
    if load_config(model).tie_word_embeddings:  # the tied head is the embedding, listed twice in the state
        state.pop("lm_head.weight", None)
    assert names == set(state)  # nothing missing, nothing unexpected (HF would re-init silently)
    for name in state:
        assert torch.equal(weights.get(name), state[name]), name
    logits = hf(torch.tensor([[1, 2, 3, 4]])).logits
    assert logits.shape == (1, 4, load_config(model).vocab_size) and torch.isfinite(logits).all()


def test_preset_features(factory_model_dir):
    names = {p: set(Weights.open(factory_model_dir(p)).names) for p in PRESETS}
    assert "model.layers.0.self_attn.q_proj.bias" in names["qwen2"]
    assert "model.layers.0.self_attn.o_proj.bias" not in names["qwen2"]
    assert "model.layers.1.self_attn.k_norm.weight" in names["qwen3"]
    assert not any("bias" in n or "q_norm" in n for n in names["llama"] | names["mistral"])
    qwen3 = load_config(factory_model_dir("qwen3"))
    assert qwen3.head_dim * qwen3.num_attention_heads != qwen3.hidden_size  # explicit head_dim really matters
    llama = load_config(factory_model_dir("llama"))
    assert llama.num_key_value_heads < llama.num_attention_heads  # GQA


def test_special_token_ids_agree_across_all_files(factory_model_dir):
    from transformers import AutoTokenizer

    model = factory_model_dir("llama")
    config = json.loads((model / "config.json").read_text())
    gen = json.loads((model / "generation_config.json").read_text())
    tok = AutoTokenizer.from_pretrained(model)
    assert tok.convert_tokens_to_ids([BOS, IM_END, PAD]) == [config["bos_token_id"], config["eos_token_id"],
                                                             config["pad_token_id"]]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (gen["bos_token_id"], gen["eos_token_id"],
                                                                      gen["pad_token_id"])
    assert len(tok) == config["vocab_size"]
    # the tokenizer adds BOS and the template does not write it, so an encoded rendered prompt has exactly one
    text = tok.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True, tokenize=False)
    ids = tok(text)["input_ids"]
    assert ids[0] == config["bos_token_id"] and ids.count(config["bos_token_id"]) == 1


def test_tokenizer_round_trips_in_the_tokenizers_library(factory_model_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(factory_model_dir("llama") / "tokenizer.json"))
    text = "The keeper walked to the library. Ünïcödé and emoji 🦙 too!"
    enc = tok.encode(text)
    assert enc.ids[0] == tok.token_to_id(BOS) and tok.decode(enc.ids, skip_special_tokens=True) == text
    assert len(tok.encode("the harbour").ids) < len("the harbour")  # merges were learned


@pytest.mark.parametrize("overrides", [
    {"tie_word_embeddings": True},
    {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    {"head_dim": 8, "num_hidden_layers": 3},
    {"torch_dtype": "bfloat16"},
])
def test_options_are_honoured_and_loadable(factory_model_dir, overrides):
    model = factory_model_dir("llama", **overrides)
    cfg, weights = load_config(model), Weights.open(model)
    hf = load_hf(model)
    if overrides.get("tie_word_embeddings"):
        assert "lm_head.weight" not in weights
        assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    if "rope_scaling" in overrides:
        assert cfg.rope_scaling["factor"] == 2.0 and hf.config.rope_parameters["rope_type"] == "linear"
    if "head_dim" in overrides:
        assert cfg.head_dim == 8 and weights.info("model.layers.2.self_attn.q_proj.weight").shape == (32, 64)
    if "torch_dtype" in overrides:
        assert {weights.info(n).dtype for n in weights.names} == {"BF16"}


def test_weights_are_deterministic_by_seed(tmp_path):
    a, b = build_model_dir(tmp_path / "a", seed=3), build_model_dir(tmp_path / "b", seed=3)
    c = build_model_dir(tmp_path / "c", seed=4)
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    emb = Weights.open(a).get("model.embed_tokens.weight")
    assert 0.015 < emb.std().item() < 0.025  # the configured initializer_range


def test_vocab_override_changes_embedding_rows_only(factory_model_dir):
    model = factory_model_dir("llama", vocab_size=520)
    assert Weights.open(model).info("model.embed_tokens.weight").shape[0] == 520
    assert len(json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]) < 520


def test_unknown_preset_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'gpt2'"):
        build_model_dir(tmp_path, "gpt2")


def test_weight_shapes_cover_every_layer():
    config = {"hidden_size": 8, "intermediate_size": 16, "vocab_size": 10, "num_attention_heads": 2,
              "num_key_value_heads": 1, "num_hidden_layers": 3, "model_type": "llama", "tie_word_embeddings": True}
    shapes = weight_shapes(config)
    assert len(shapes) == 1 + 3 * 9 + 1 and shapes["model.layers.2.self_attn.k_proj.weight"] == (4, 8)
