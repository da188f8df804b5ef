"""Granite 4 (`granitehybrid`) GGUF tensors back in Hugging Face layout: what convert_hf_to_gguf.py
(conversion/granite.py GraniteHybridModel over conversion/mamba.py Mamba2Model) changes in the Mamba2 layers and
the MLPs, undone tensor by tensor, and the config.json fields rebuilt from the `granitehybrid.*` metadata.

The converter:
- stores A = -exp(A_log) as `ssm_a` [heads, 1] (so A_log = log(-A)), D as `ssm_d` [heads, 1], dt_bias as
  `ssm_dt.bias`; squeezes the conv [C, 1, K] to [C, K]; writes the gated norm's weight [inner] grouped as
  [groups, inner / groups];
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

RECURRENT, ATTENTION = "mamba", "attention"       # the hub's layer_types spelling (the converter's too)
# llama.cpp stem inside blk.N -> Hugging Face name inside model.layers.N
LAYER_NAMES = {"ssm_in": "mamba.in_proj", "ssm_conv1d": "mamba.conv1d", "ssm_norm": "mamba.norm",
               "ssm_out": "mamba.out_proj", "ffn_gate_inp": "block_sparse_moe.router.layer",
               "ffn_down_exps": "block_sparse_moe.output_linear", "ffn_down_shexp": "shared_mlp.output_linear",
               "ffn_down": "shared_mlp.output_linear"}
TENSOR_NAMES = {"ssm_a": "mamba.A_log", "ssm_d": "mamba.D", "ssm_dt.bias": "mamba.dt_bias"}
# Hugging Face tensor -> llama.cpp stems joined along the rows (alternatives: with experts / without)
JOINED = {"block_sparse_moe.input_linear.weight": ("ffn_gate_exps", "ffn_up_exps"),
          "shared_mlp.input_linear.weight": (("ffn_gate_shexp", "ffn_up_shexp"), ("ffn_gate", "ffn_up"))}
# {arch}.<key> -> a config.json field (or a raw key derive_config turns into one)
CONFIG_KEYS = {"attention.scale": "attention_multiplier", "embedding_scale": "embedding_multiplier",
               "residual_scale": "residual_multiplier", "logit_scale": "logits_scaling",
               "expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
               "expert_shared_feed_forward_length": "shared_intermediate_size", "ssm.conv_kernel": "mamba_d_conv",
               "ssm.state_size": "mamba_d_state", "ssm.group_count": "mamba_n_groups",
               "ssm.time_step_rank": "mamba_n_heads", "ssm.inner_size": "mamba_inner_size",
               "rope.scaling.finetuned": "rope_finetuned"}


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


def touches(hf_name: str) -> bool:
    """Whether `finish` changes this tensor's values (only A: the other changes are reshapes, hf_shape)."""
    return hf_name.endswith(".mamba.A_log")


def finish(hf_name: str, out: torch.Tensor, meta) -> torch.Tensor:
    return torch.log(-out)                       # ssm_a = A = -exp(A_log)


def hf_shape(hf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """ssm_a / ssm_d [heads, 1] -> [heads]; the grouped norm [groups, inner / groups] -> [inner]; the conv
    [C, K] -> [C, 1, K]."""
    if hf_name.endswith((".mamba.A_log", ".mamba.D", ".mamba.norm.weight")):
        return (math.prod(shape),)
    return (shape[0], 1, *shape[1:]) if hf_name.endswith(".mamba.conv1d.weight") else tuple(shape)


def join(hf_name: str, parts: list[torch.Tensor], meta=None) -> torch.Tensor:
    """gate [.., I, H] and up [.., I, H] -> input_linear [.., 2 I, H] (gate rows first, as transformers splits it);
    the metadata (gguf_weights passes it to every join) is not needed here."""
    return torch.cat(parts, dim=-2).contiguous()


def join_shape(hf_name: str, shapes: list[tuple]) -> tuple | None:
    if any(len(s) < 2 for s in shapes) or len({(s[:-2], s[-1]) for s in shapes}) != 1:
        return None
    return (*shapes[0][:-2], sum(s[-2] for s in shapes), shapes[0][-1])
