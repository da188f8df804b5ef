"""Mamba2 layers in GGUF back in Hugging Face layout (llama.cpp's `ssm_*` tensors; the pinned converter's
conversion/mamba.py `Mamba2Model`, which Falcon-H1's converter builds on), and Falcon-H1's (`falcon-h1`) config.

What the converter changes in a Mamba2 mixer, undone here:
- A is stored as `ssm_a` = -exp(A_log) [heads, 1] (so A_log = log(-A)), D as `ssm_d` [heads, 1];
- the conv taps as [C, K] (Hugging Face's Conv1d weight is [C, 1, K]);
- the grouped output norm as [groups, inner / groups] (Hugging Face: [inner]).
Falcon-H1's converter (conversion/falcon_h1.py) also folds every muP multiplier into the weights (embedding,
lm_head, q/k/v/o, the in_proj segments, out_proj, the MLP's gate and down), so the GGUF reads as a Falcon-H1
whose multipliers are all 1; the GGUF keeps no mamba_norm_before_gate, and llama.cpp norms after the gate
(models/mamba-base.cpp build_mamba2_layer), which is what this reading runs.
"""
from __future__ import annotations

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

FALCON_H1_NAMES = {**MAMBA2_NAMES, "ffn_norm": "pre_ff_layernorm.weight"}   # stored without ".weight"
FALCON_H1_LAYERS = {"ffn_gate": "feed_forward.gate_proj", "ffn_up": "feed_forward.up_proj",
                    "ffn_down": "feed_forward.down_proj"}
FALCON_H1_KEYS = {**MAMBA2_KEYS, "ssm.inner_size": "mamba_d_ssm"}


def hf_shape(hf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The Hugging Face shape of a stored Mamba2 tensor (the values keep their order: a reshape)."""
    if hf_name.endswith("mamba.conv1d.weight"):
        return (shape[0], 1, *shape[1:])                            # [C, K] -> [C, 1, K]
    if hf_name.endswith(("mamba.A_log", "mamba.D", "mamba.norm.weight")):
        n = 1
        for d in shape:
            n *= d
        return (n,)                                                 # [heads, 1], [groups, inner / groups] -> flat
    return tuple(shape)


def touches(hf_name: str) -> bool:
    return hf_name.endswith("mamba.A_log")


def finish(hf_name: str, out: torch.Tensor, meta) -> torch.Tensor:
    """ssm_a holds A = -exp(A_log): back to A_log."""
    return torch.log(-out) if hf_name.endswith("mamba.A_log") else out


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
