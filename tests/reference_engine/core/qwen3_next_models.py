"""Tiny Qwen3-Next / Qwen3.5 text models built by transformers (its torch path: no fla, no causal-conv1d), with
the recurrent dynamics made to matter: decays exp(g) spread over ~0.3..0.95 (A_log, dt_bias drawn so), the
zero-centred norms drawn around 0, the gated norm around 1. Cached per test session."""
from __future__ import annotations

import atexit
import functools
import json
import math
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from reference_engine.testing import factory

VOCAB = 97
BASE = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=512, initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=12)

# name -> (config class, model class, overrides): GQA-style value heads (4 per 2 key heads) or not, layer
# kinds from layer_types or the interval, MoE with dense layers, tied embeddings
VARIANTS: dict[str, tuple[str, str, dict]] = {
    "next_moe_interval": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        num_hidden_layers=4, intermediate_size=48, linear_num_key_heads=2, linear_num_value_heads=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        mlp_only_layers=[1], full_attention_interval=2)),
    "qwen35_dense_tied": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        num_hidden_layers=3, intermediate_size=40, linear_num_key_heads=2, linear_num_value_heads=2,
        tie_word_embeddings=True, layer_types=["linear_attention", "full_attention", "linear_attention"])),
    "qwen35_dense_value_groups": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        num_hidden_layers=4, intermediate_size=40, linear_num_key_heads=2, linear_num_value_heads=6)),
    "qwen35_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(
        num_hidden_layers=4, linear_num_key_heads=1, linear_num_value_heads=3, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24)),
}
# the same, for GGUF export only (build_for_gguf), value heads as large as key heads (llama.cpp's loader
# assumes it: GGF030): Qwen3-Next with every layer MoE (the pinned converter cannot map a dense Qwen3-Next
# layer's mlp); Qwen3.5-MoE with 4 value heads over 2 key heads (the converter tiles them), tied (Qwen's
# 152k-row vocabulary)
FOR_GGUF: dict[str, tuple[str, str, dict]] = {
    "next_moe_gguf": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        num_hidden_layers=4, intermediate_size=48, linear_num_key_heads=2, linear_num_value_heads=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        full_attention_interval=2, linear_value_head_dim=8)),
    "qwen35_moe_gguf": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(
        num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        linear_value_head_dim=8, tie_word_embeddings=True,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"])),
}

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-qwen3next-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def randomise(model) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):         # gated norm: a plain weight
                param.uniform_(0.5, 1.5)
            elif "norm" in name:                                 # zero-centred: (1 + w)
                param.uniform_(-0.5, 0.5)
            elif name.endswith("A_log"):                         # exp(A_log) in 0.1..1
                param.copy_(torch.empty_like(param).uniform_(math.log(0.1), 0.0))
            elif name.endswith("dt_bias"):
                param.uniform_(-0.5, 0.5)
            elif name.endswith("conv1d.weight"):
                param.normal_(0.0, 0.4)
            elif name.endswith("embed_tokens.weight"):          # the pad row too (nn.Embedding zeroes it)
                param.normal_(0.0, 0.1)


def build(out: Path, variant: str, seed: int = 0, tokenizer: bool = False) -> Path:
    """The model directory; with tokenizer=True also the factory's trained BPE tokenizer, chat template and
    generation config (the vocabulary sized to it), a directory `llmdoctor check` reads whole."""
    import transformers
    config_cls, model_cls, overrides = VARIANTS[variant]
    extra = {}
    if tokenizer:
        tok = factory.tokenizer_json()
        ids = factory.special_ids(tok)
        extra = dict(vocab_size=factory.tokenizer_length(tok), bos_token_id=ids[factory.BOS],
                     eos_token_id=ids[factory.IM_END], pad_token_id=ids[factory.PAD])
    config = getattr(transformers, config_cls)(**{**BASE, **overrides, **extra})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    randomise(model)
    model.save_pretrained(out, safe_serialization=True)
    if tokenizer:
        raw = json.loads((out / "config.json").read_text())
        factory.write_model_dir(out, raw, tok, dict(load_file(out / "model.safetensors")))
    return out


def build_for_gguf(out: Path, variant: str, tokenizer_dir: Path, seed: int = 0) -> Path:
    """The model with a real tokenizer llama.cpp's converter recognises (its vocabulary size), for GGUF export."""
    import json as _json
    vocab = len(_json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"])
    config_cls, model_cls, overrides = {**VARIANTS, **FOR_GGUF}[variant]
    import transformers
    config = getattr(transformers, config_cls)(**{**BASE, **overrides, "vocab_size": vocab, "pad_token_id": None})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    randomise(model)
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    return out


# GGUF architecture -> (variant, tokenizer, seed): the pinned converter must recognise the tokenizer's
# pre-tokenizer, and transformers 5 loads a qwen3_5_moe_text directory's tokenizer as Qwen3_5Tokenizer (Qwen3.5's
# own regex over the file's vocabulary, whatever tokenizer.json says), recognised only over Qwen's own vocabulary
# (the sdist's ggml-vocab-qwen35, as transformers converts it); Qwen3-Next's directory keeps SmolLM2's tokenizer.
# Seed 1 for Qwen3.5-MoE: seed 0's router sends 92% of the probe tokens to one expert of layer 3 (MOE005 warns)
GGUF_VARIANTS = {"qwen3next": ("next_moe_gguf", "smollm2", 0), "qwen35moe": ("qwen35_moe_gguf", "qwen35", 1)}


@functools.cache
def gguf_pair(arch: str) -> tuple[Path, Path]:
    """(safetensors directory, its F32 GGUF by llama.cpp's pinned convert_hf_to_gguf.py --no-mtp), converted
    once per session (~10-15 s each on 2 cores); AssetError when an asset cannot be fetched."""
    from tests import assets, assets_gguf
    variant, tokenizer, seed = GGUF_VARIANTS[arch]
    tok_dir = assets.smollm2_dir() if tokenizer == "smollm2" else assets_gguf.hf_tokenizer_of_vocab_gguf(tokenizer)
    hf_dir = build_for_gguf(_ROOT / f"{arch}-gguf" / "hf", variant, tok_dir, seed)
    return hf_dir, assets_gguf.convert_hf_dir(hf_dir, hf_dir.parent / f"{arch}-f32.gguf", "f32", None, ("--no-mtp",))


@functools.cache
def model_dir(variant: str) -> Path:
    return build(_ROOT / variant, variant)


@functools.cache
def checkable_dir(variant: str) -> Path:
    """The model with the factory's tokenizer and chat template: a directory `llmdoctor check` reads whole."""
    return build(_ROOT / f"{variant}-tok", variant, tokenizer=True)


@functools.cache
def hf_model(variant: str):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir(variant), dtype=torch.float32).eval()


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
