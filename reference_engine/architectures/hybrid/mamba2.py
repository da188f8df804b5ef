"""The Mamba2 layer shared by Granite 4 and Falcon-H1, outside its torch code: transformers' defaults of its sizes
(GraniteMoeHybridConfig and FalconH1Config agree on them), read one way (`size`), and what the pinned converter
(conversion/mamba.py `Mamba2Model`) changes in every Mamba2 mixer it writes to GGUF, undone here:
- A is stored as `ssm_a` = -exp(A_log) [heads, 1] (so A_log = log(-A)), D as `ssm_d` [heads, 1], dt_bias as
  `ssm_dt.bias`;
- the conv taps as [C, K] (Hugging Face's Conv1d weight is [C, 1, K]);
- the grouped output norm as [groups, inner / groups] (Hugging Face: [inner]).
"""
from __future__ import annotations

import math

import torch

from reference_engine.errors import ModelDirError

# config.json Mamba2 fields -> the value their config classes take when absent
DEFAULTS = {"mamba_n_heads": 128, "mamba_d_state": 256, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_d_conv": 4,
            "mamba_chunk_size": 256}


def size(raw: dict, key: str, default: int | None = None) -> int:
    """A Mamba2 size from config.json (DEFAULTS when absent): a non-negative integer, else a one-line
    ModelDirError naming it."""
    value = raw.get(key, DEFAULTS.get(key) if default is None else default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelDirError("config.json", f"'{key}' must be a non-negative integer, found {value!r}")
    return value

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


