"""Mamba2 layers in GGUF back in Hugging Face layout, and the two hybrids the pinned converter writes with them:
Granite 4 (`granitehybrid`: conversion/granite.py GraniteHybridModel) and Falcon-H1 (`falcon-h1`:
conversion/falcon_h1.py), both over conversion/mamba.py `Mamba2Model`.

What the converter changes in every Mamba2 mixer, undone here:
- A is stored as `ssm_a` = -exp(A_log) [heads, 1] (so A_log = log(-A)), D as `ssm_d` [heads, 1], dt_bias as
  `ssm_dt.bias`;
- the conv taps as [C, K] (Hugging Face's Conv1d weight is [C, 1, K]);
- the grouped output norm as [groups, inner / groups] (Hugging Face: [inner]).

Granite 4, besides:
- splits the fused experts input_linear [E, 2 I, H] into ffn_gate_exps / ffn_up_exps [E, I, H] and the shared MLP's
  input_linear [2 S, H] into ffn_gate_shexp / ffn_up_shexp (ffn_gate / ffn_up on a model without experts, whose
  output_linear is ffn_down): joined back along the rows (`join`);
- permutes attention q/k rows like Llama's (undo_permute); marks a layer recurrent by head_count_kv 0 and writes
  rope.scaling.finetuned false on every hybrid (llama.cpp then runs attention without RoPE, Granite 4's "nope");
- keeps the multipliers as attention.scale / embedding_scale / residual_scale / logit_scale (an absent
  attention.scale is llama.cpp's head_dim ** -0.5, an absent other one 1), d_inner as ssm.inner_size and the
  SSM heads as ssm.time_step_rank. Not stored: mamba_chunk_size (the engine's default 256, transformers' too)
  and time_step_limit (llama.cpp never clamps dt: (0, inf), transformers' default).

Falcon-H1's converter folds every muP multiplier into the weights (embedding, lm_head, q/k/v/o, the in_proj
segments, out_proj, the MLP's gate and down), so the GGUF reads as a Falcon-H1 whose multipliers are all 1; the
GGUF keeps no mamba_norm_before_gate, and llama.cpp norms after the gate (models/mamba-base.cpp
build_mamba2_layer), which is what this reading runs.
"""
from __future__ import annotations

import math

import torch

# llama.cpp name inside blk.N (suffix included) -> Hugging Face name inside model.layers.N
MAMBA2_NAMES = {
    "ssm_in.weight": "mamba.in_proj.weight", "ssm_in.bias": "mamba.in_proj.bias",
    "ssm_conv1d.weight": "mamba.conv1d.weight", "ssm_conv1d.bias": "mamba.conv1d.bias",
    "ssm_dt.bias": "mamba.dt_bias", "ssm_a": "mamba.A_log", "ssm_d": "mamba.D",
    "ssm_norm.weight": "mamba.norm.weight", "ssm_out.weight": "mamba.out_proj.weight",
    "ssm_out.bias": "mamba.out_proj.bias",
}
# {arch}.ssm.<key> -> config.json field
MAMBA2_KEYS = {"ssm.conv_kernel": "mamba_d_conv", "ssm.state_size": "mamba_d_state",
               "ssm.time_step_rank": "mamba_n_heads", "ssm.group_count": "mamba_n_groups"}


def hf_shape(hf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The Hugging Face shape of a stored Mamba2 tensor (the values keep their order: a reshape): ssm_a / ssm_d
    [heads, 1] -> [heads]; the grouped norm [groups, inner / groups] -> [inner]; the conv [C, K] -> [C, 1, K]."""
    if hf_name.endswith(("mamba.A_log", "mamba.D", "mamba.norm.weight")):
        return (math.prod(shape),)
    return (shape[0], 1, *shape[1:]) if hf_name.endswith("mamba.conv1d.weight") else tuple(shape)


def touches(hf_name: str) -> bool:
    """Whether `finish` changes this tensor's values (only A: the other changes are reshapes, hf_shape)."""
    return hf_name.endswith("mamba.A_log")


def finish(hf_name: str, out: torch.Tensor, meta) -> torch.Tensor:
    """ssm_a holds A = -exp(A_log): back to A_log."""
    return torch.log(-out) if hf_name.endswith("mamba.A_log") else out


# ------------------------------------------------------------------------------------------------ Granite 4

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
               "expert_shared_feed_forward_length": "shared_intermediate_size", **MAMBA2_KEYS,
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


# ------------------------------------------------------------------------------------------------ Falcon-H1

FALCON_H1_NAMES = {**MAMBA2_NAMES, "ffn_norm": "pre_ff_layernorm.weight"}   # stored without ".weight"
FALCON_H1_LAYERS = {"ffn_gate": "feed_forward.gate_proj", "ffn_up": "feed_forward.up_proj",
                    "ffn_down": "feed_forward.down_proj"}
FALCON_H1_KEYS = {**MAMBA2_KEYS, "ssm.inner_size": "mamba_d_ssm"}


def falcon_h1_config(raw: dict) -> dict:
    """What the GGUF of a Falcon-H1 is, as config.json fields: the head dim from inner / heads, the norm after the
    gate (llama.cpp's only form), the multipliers at their default 1 (folded into the weights)."""
    return {"mamba_d_head": "auto", "mamba_norm_before_gate": False}


def falcon_h1_tensor_fields(tensors: dict) -> dict:
    """The switches the tensors present tell: the Mamba2 output norm, conv/in_proj/out_proj and MLP biases."""
    return {"mamba_rms_norm": "blk.0.ssm_norm.weight" in tensors, "mamba_conv_bias": "blk.0.ssm_conv1d.bias" in tensors,
            "mamba_proj_bias": "blk.0.ssm_in.bias" in tensors, "projectors_bias": "blk.0.ssm_out.bias" in tensors,
            "mlp_bias": "blk.0.ffn_gate.bias" in tensors}


def _number(raw: dict, key: str, default: float = 1.0) -> float:
    value = raw.get(key, default)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _numbers(raw: dict, key: str, count: int) -> list[float]:
    value = raw.get(key)
    if not isinstance(value, list) or len(value) != count:
        return [1.0] * count
    return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 1.0 for v in value]


def falcon_h1_folds(raw: dict, hf_name: str) -> float | torch.Tensor | None:
    """What a correct conversion multiplies the Hugging Face tensor `hf_name` by, from the source config.json: the
    muP multipliers folded into the weights (a float, or [rows, 1] for in_proj's five segments), None when the
    tensor is kept as it is. A bias gets what its output gets: q/v biases none, k's key_multiplier (the converter
    itself also scales them by attention_in_multiplier: the diff shows it)."""
    attn_in, key = _number(raw, "attention_in_multiplier"), _number(raw, "key_multiplier")
    gate, down = _numbers(raw, "mlp_multipliers", 2)
    bias = hf_name.endswith(".bias")
    scales = {"self_attn.q_proj": None if bias else attn_in, "self_attn.v_proj": None if bias else attn_in,
              "self_attn.k_proj": key if bias else key * attn_in,
              "self_attn.o_proj": _number(raw, "attention_out_multiplier"), "feed_forward.gate_proj": gate,
              "feed_forward.down_proj": down, "mamba.out_proj": _number(raw, "ssm_out_multiplier"),
              "lm_head": _number(raw, "lm_head_multiplier"), "embed_tokens": _number(raw, "embedding_multiplier")}
    part = next((p for p in scales if f"{p}." in hf_name), None)
    if part is not None:
        return scales[part]
    if "mamba.in_proj." not in hf_name:
        return None
    inner = raw.get("mamba_d_ssm", 1024)                     # FalconH1Config's defaults; null: expand x hidden
    if inner is None and isinstance(raw.get("hidden_size"), int) and isinstance(raw.get("mamba_expand", 2), int):
        inner = raw.get("mamba_expand", 2) * raw["hidden_size"]
    groups, state, heads = raw.get("mamba_n_groups", 1), raw.get("mamba_d_state", 256), raw.get("mamba_n_heads", 128)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (inner, groups, state, heads)):
        return None
    gn = groups * state
    rows = torch.cat([torch.full((n,), m) for n, m in zip((inner, inner, gn, gn, heads),
                                                           _numbers(raw, "ssm_multipliers", 5))])
    rows = rows if bias else rows * _number(raw, "ssm_in_multiplier")
    return rows if bias else rows[:, None]
