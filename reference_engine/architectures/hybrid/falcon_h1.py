"""Falcon-H1 (FalconH1ForCausalLM): what the files say about it -- FalconH1Config's defaults, its muP multipliers
read one way (`multiplier`, `multipliers`: a one-line ModelDirError for a bad value, wherever they are read), its
Mamba2 inner size, and its GGUF (`falcon-h1`: conversion/falcon_h1.py over the Mamba2 writer, mamba2.py).

The converter folds every muP multiplier into the weights (embedding, lm_head, q/k/v/o, the in_proj segments,
out_proj, the MLP's gate and down), so the GGUF reads as a Falcon-H1 whose multipliers are all 1 (`folds` says
what a correct conversion multiplied each tensor by); the GGUF keeps no mamba_norm_before_gate, and llama.cpp
norms after the gate (models/mamba-base.cpp build_mamba2_layer), which is what its reading runs.
"""
from __future__ import annotations

import math

import torch

from reference_engine.architectures.base import ArchitectureData, GGUFArch
from reference_engine.architectures.hybrid import mamba2
from reference_engine.errors import ModelDirError

FALCON_H1 = "FalconH1ForCausalLM"
SSM_SEGMENTS = ("z", "x", "B", "C", "dt")       # ssm_multipliers, in in_proj's order
# FalconH1Config: a Mamba2 inner size of its own (null: mamba_expand x hidden_size), the output norm off
CLASS_DEFAULTS = {"mamba_d_ssm": 1024, "mamba_n_heads": mamba2.DEFAULTS["mamba_n_heads"],
                  "mamba_d_state": mamba2.DEFAULTS["mamba_d_state"], "mamba_rms_norm": False,
                  "mamba_norm_before_gate": True}


def multiplier(raw: dict, key: str) -> float:
    """A muP multiplier from config.json (1 when absent): a finite number, else a one-line ModelDirError."""
    value = raw.get(key, 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelDirError("config.json", f"'{key}' must be a finite number, found {value!r}")
    return float(value)


def multipliers(raw: dict, key: str, count: int) -> tuple[float, ...]:
    """A list of `count` multipliers (all 1 when absent or null)."""
    value = raw.get(key)
    if value is None:
        return (1.0,) * count
    if (not isinstance(value, list) or len(value) != count
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in value)):
        raise ModelDirError("config.json", f"'{key}' must list {count} finite numbers, found {str(value)[:80]}")
    return tuple(float(v) for v in value)


def ssm_inner(raw: dict) -> int:
    """mamba_d_ssm (CLASS_DEFAULTS when absent), or mamba_expand x hidden_size when it is null."""
    if "mamba_d_ssm" in raw and raw["mamba_d_ssm"] is None:
        return mamba2.size(raw, "mamba_expand") * mamba2.size(raw, "hidden_size", 0)
    return mamba2.size(raw, "mamba_d_ssm", CLASS_DEFAULTS["mamba_d_ssm"])


# llama.cpp name inside blk.N (suffix included) -> Hugging Face name inside model.layers.N
TENSOR_NAMES = {**mamba2.MAMBA2_NAMES, "ffn_norm": "pre_ff_layernorm.weight"}   # stored without ".weight"
LAYER_NAMES = {"ffn_gate": "feed_forward.gate_proj", "ffn_up": "feed_forward.up_proj",
               "ffn_down": "feed_forward.down_proj"}
CONFIG_KEYS = {**mamba2.MAMBA2_KEYS, "ssm.inner_size": "mamba_d_ssm"}


def gguf_config(raw: dict) -> dict:
    """What the GGUF of a Falcon-H1 is, as config.json fields: the head dim from inner / heads, the norm after the
    gate (llama.cpp's only form), the multipliers at their default 1 (folded into the weights)."""
    return {"mamba_d_head": "auto", "mamba_norm_before_gate": False}


def tensor_fields(tensors: dict) -> dict:
    """The switches the tensors present tell: the Mamba2 output norm, conv/in_proj/out_proj and MLP biases."""
    return {"mamba_rms_norm": "blk.0.ssm_norm.weight" in tensors, "mamba_conv_bias": "blk.0.ssm_conv1d.bias" in tensors,
            "mamba_proj_bias": "blk.0.ssm_in.bias" in tensors, "projectors_bias": "blk.0.ssm_out.bias" in tensors,
            "mlp_bias": "blk.0.ffn_gate.bias" in tensors}


def folds(raw: dict, hf_name: str) -> float | torch.Tensor | None:
    """What a correct conversion multiplies the Hugging Face tensor `hf_name` by, from the source config.json: the
    muP multipliers folded into the weights (a float, or [rows, 1] for in_proj's five segments), None when the
    tensor is kept as it is or a multiplier it needs does not read (the config checks report that one). A bias
    gets what its output gets: q/v biases none, k's key_multiplier (the converter itself also scales them by
    attention_in_multiplier: the diff shows it)."""
    bias = hf_name.endswith(".bias")
    part = next((p for p in (*FOLDED, "mamba.in_proj") if f"{p}." in hf_name), None)
    try:
        if part == "mamba.in_proj":
            return in_proj_rows(raw, bias)
        return None if part is None else FOLDED[part](raw, bias)
    except ModelDirError:
        return None


def one(key: str):
    return lambda raw, bias: multiplier(raw, key)


def attention_in(raw: dict, bias: bool) -> float | None:
    return None if bias else multiplier(raw, "attention_in_multiplier")


def key_scale(raw: dict, bias: bool) -> float:
    key = multiplier(raw, "key_multiplier")
    return key if bias else key * multiplier(raw, "attention_in_multiplier")


# Hugging Face module -> what the converter multiplies its weight (bias) by
FOLDED = {"self_attn.q_proj": attention_in, "self_attn.v_proj": attention_in, "self_attn.k_proj": key_scale,
          "self_attn.o_proj": one("attention_out_multiplier"),
          "feed_forward.gate_proj": lambda raw, bias: multipliers(raw, "mlp_multipliers", 2)[0],
          "feed_forward.down_proj": lambda raw, bias: multipliers(raw, "mlp_multipliers", 2)[1],
          "mamba.out_proj": one("ssm_out_multiplier"), "lm_head": one("lm_head_multiplier"),
          "embed_tokens": one("embedding_multiplier")}


def in_proj_rows(raw: dict, bias: bool) -> torch.Tensor | None:
    """in_proj's rows times their segment's ssm_multipliers entry (times ssm_in_multiplier for the weight)."""
    inner, groups = ssm_inner(raw), mamba2.size(raw, "mamba_n_groups")
    state, heads = mamba2.size(raw, "mamba_d_state"), mamba2.size(raw, "mamba_n_heads")
    if not all(v > 0 for v in (inner, groups, state, heads)):
        return None
    gn = groups * state
    rows = torch.cat([torch.full((n,), m) for n, m in zip((inner, inner, gn, gn, heads),
                                                           multipliers(raw, "ssm_multipliers", len(SSM_SEGMENTS)))])
    return rows if bias else (rows * multiplier(raw, "ssm_in_multiplier"))[:, None]


# attention and Mamba2 in every layer, the muP multipliers folded into the weights; no Q/K permutation
# (llama.cpp's NEOX rotary)
GGUF = GGUFArch(FALCON_H1, "falcon_h1", layer_names=LAYER_NAMES, tensor_names=TENSOR_NAMES,
                global_names={"output_norm": "model.final_layernorm"}, config_keys=CONFIG_KEYS, derive=gguf_config,
                tensor_fields=tensor_fields, touches=mamba2.touches, finish=mamba2.finish, hf_shape=mamba2.hf_shape,
                folds=folds)

DATA = ArchitectureData("falcon_h1", (FALCON_H1,), model_types={"falcon_h1": FALCON_H1},
                        class_defaults={"falcon_h1": CLASS_DEFAULTS}, gguf={"falcon-h1": GGUF}, recurrent="mamba2")
