"""Fixtures for the CLI/runner tests: fake checks registered for one test, and small model directories."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import checks
from checks.catalogue.registry import REGISTRY

TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 16,
               "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "max_position_embeddings": 128,
               "torch_dtype": "float32", "tie_word_embeddings": False}


@pytest.fixture
def registry_sandbox():
    """Real check modules loaded; anything a test registers is removed afterwards."""
    checks.load_all()
    saved = dict(REGISTRY)
    yield REGISTRY
    REGISTRY.clear()
    REGISTRY.update(saved)


def llama_tensors(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every tensor a Llama checkpoint with `config` has, HF names, small random values."""
    g = torch.Generator().manual_seed(seed)
    h, inter, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = h // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                   p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                   p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                   p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
                   p + "post_attention_layernorm.weight": (h,)}
    return {name: (torch.ones(shape) if len(shape) == 1 else torch.randn(shape, generator=g) * 0.02)
            for name, shape in shapes.items()}


def write_weights_dir(path: Path, config: dict | None = None) -> Path:
    """config.json + model.safetensors (no tokenizer): enough for file, config and weight checks."""
    config = config or TINY_CONFIG
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(llama_tensors(config), str(path / "model.safetensors"))
    return path


@pytest.fixture
def weights_dir(tmp_path) -> Path:
    return write_weights_dir(tmp_path / "model")


@pytest.fixture
def config_only_dir(tmp_path) -> Path:
    root = tmp_path / "config_only"
    root.mkdir()
    (root / "config.json").write_text(json.dumps(TINY_CONFIG))
    return root
