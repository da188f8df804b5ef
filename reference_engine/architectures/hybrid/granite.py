"""Granite 4 (GraniteMoeHybridForCausalLM): what the files say about it, and what the pinned converter
(conversion/granite.py GraniteHybridModel, over the Mamba2 writer: mamba2.py) changes besides the Mamba2 layers:
- splits the fused experts input_linear [E, 2 I, H] into ffn_gate_exps / ffn_up_exps [E, I, H] and the shared MLP's
  input_linear [2 S, H] into ffn_gate_shexp / ffn_up_shexp (ffn_gate / ffn_up on a model without experts, whose
  output_linear is ffn_down): joined back along the rows (`join`);
- permutes attention q/k rows like Llama's (undo_permute); marks a layer recurrent by head_count_kv 0 and writes
  rope.scaling.finetuned false on every hybrid (llama.cpp then runs attention without RoPE, Granite 4's "nope");
- keeps the multipliers as attention.scale / embedding_scale / residual_scale / logit_scale (an absent
  attention.scale is llama.cpp's head_dim ** -0.5, an absent other one 1), d_inner as ssm.inner_size and the
  SSM heads as ssm.time_step_rank. Not stored: mamba_chunk_size (the engine's default 256, transformers' too)
  and time_step_limit (llama.cpp never clamps dt: (0, inf), transformers' default).
"""
from __future__ import annotations

import math

import torch

from reference_engine.architectures.base import ArchitectureData, GGUFArch, layer_kinds_from_kv
from reference_engine.architectures.hybrid import mamba2

GRANITE = "GraniteMoeHybridForCausalLM"

RECURRENT, ATTENTION = "mamba", "attention"       # the hub's layer_types spelling (the converter's too)
# llama.cpp stem inside blk.N -> Hugging Face name inside model.layers.N (the Mamba2 ones: MAMBA2_NAMES)
LAYER_NAMES = {"ffn_gate_inp": "block_sparse_moe.router.layer",
               "ffn_down_exps": "block_sparse_moe.output_linear", "ffn_down_shexp": "shared_mlp.output_linear",
               "ffn_down": "shared_mlp.output_linear"}
# Hugging Face tensor -> llama.cpp stems joined along the rows (alternatives: with experts / without)
JOINED = {"block_sparse_moe.input_linear.weight": ("ffn_gate_exps", "ffn_up_exps"),
          "shared_mlp.input_linear.weight": (("ffn_gate_shexp", "ffn_up_shexp"), ("ffn_gate", "ffn_up"))}
# {arch}.<key> -> a config.json field (or a raw key derive_config turns into one)
CONFIG_KEYS = {"attention.scale": "attention_multiplier", "embedding_scale": "embedding_multiplier",
               "residual_scale": "residual_multiplier", "logit_scale": "logits_scaling",
               "expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
               "expert_shared_feed_forward_length": "shared_intermediate_size", **mamba2.MAMBA2_KEYS,
               "ssm.inner_size": "mamba_inner_size", "rope.scaling.finetuned": "rope_finetuned"}


def tensor_fields(tensors: dict) -> dict:
    """The biases the tensors show (attention_bias from any attention layer: layer 0 may be a Mamba2 one)."""
    names = list(tensors)
    return {"mamba_conv_bias": any(n.endswith(".ssm_conv1d.bias") for n in names),
            "mamba_proj_bias": any(n.endswith(".ssm_in.bias") for n in names),
            "attention_bias": any(n.endswith(".attn_q.bias") for n in names)}


def derive_config(raw: dict) -> dict:
    """mamba_expand / mamba_d_head from ssm.inner_size, position_embedding_type from rope.scaling.finetuned,
    llama.cpp's default attention scale (ValueError: an SSM size that does not divide)."""
    out: dict = {"position_embedding_type": "rope" if raw.pop("rope_finetuned", True) else "nope"}
    hidden, heads, inner = raw.get("hidden_size"), raw.get("mamba_n_heads"), raw.pop("mamba_inner_size", None)
    if isinstance(inner, int) and isinstance(hidden, int) and isinstance(heads, int):
        if hidden < 1 or heads < 1 or inner % hidden or inner % heads:
            raise ValueError(f"ssm.inner_size {inner} is not a multiple of embedding_length {hidden} and of "
                             f"ssm.time_step_rank {heads} (the SSM heads)")
        out.update(mamba_expand=inner // hidden, mamba_d_head=inner // heads)
    head_dim = raw.get("head_dim") or (hidden or 0) // (raw.get("num_attention_heads") or 1)
    if raw.get("attention_multiplier") is None and head_dim:   # llama.cpp: f_attention_scale 0 -> 1/sqrt(head_dim)
        out["attention_multiplier"] = 1.0 / math.sqrt(head_dim)
    n = raw.get("num_hidden_layers")
    if "layer_types" not in raw and isinstance(n, int):     # one head_count_kv for every layer
        out["layer_types"] = [ATTENTION if raw.get("num_key_value_heads") else RECURRENT] * n
    return out


def join(hf_name: str, parts: list[torch.Tensor], meta=None) -> torch.Tensor:
    """gate [.., I, H] and up [.., I, H] -> input_linear [.., 2 I, H] (gate rows first, as transformers splits it);
    the metadata (gguf_weights passes it to every join) is not needed here."""
    return torch.cat(parts, dim=-2).contiguous()


def join_shape(hf_name: str, shapes: list[tuple]) -> tuple | None:
    if any(len(s) < 2 for s in shapes) or len({(s[:-2], s[-1]) for s in shapes}) != 1:
        return None
    return (*shapes[0][:-2], sum(s[-2] for s in shapes), shapes[0][-1])

GGUF = GGUFArch(GRANITE, "granitemoehybrid", permute_qk=True, layer_names=LAYER_NAMES,
                tensor_names=mamba2.MAMBA2_NAMES, transposed=JOINED, join=join, join_shape=join_shape,
                config_keys=CONFIG_KEYS, derive=derive_config, tensor_fields=tensor_fields, touches=mamba2.touches,
                finish=mamba2.finish, hf_shape=mamba2.hf_shape, per_layer=layer_kinds_from_kv(RECURRENT, ATTENTION))

DATA = ArchitectureData("granite", (GRANITE,), model_types={"granitemoehybrid": GRANITE},
                        gguf={"granitehybrid": GGUF}, recurrent="mamba2")
