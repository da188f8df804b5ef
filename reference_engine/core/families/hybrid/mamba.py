"""The Mamba2 layer shared by Granite 4 and Falcon-H1: its sizes from config.json (transformers' defaults where
absent: architectures/hybrid/mamba2.py), its tensors and the state it keeps per sequence; the mixer itself is
core/recurrent/mamba2.py."""
from __future__ import annotations

from reference_engine.architectures.hybrid.mamba2 import DEFAULTS
from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import StateLayout
from reference_engine.core.families.base import LayerPlan, MambaDims, raw_int
from reference_engine.errors import ModelDirError


def size(config: ModelConfig, key: str) -> int:
    return raw_int(config, key, DEFAULTS[key])


def time_step_limit(config: ModelConfig) -> tuple[float, float]:
    """[min, max] of dt; transformers writes infinity as {"__float__": "Infinity"} in config.json."""
    limit = config.raw.get("time_step_limit", [0.0, float("inf")])
    if limit is None:
        return 0.0, float("inf")
    bounds = [float(v["__float__"]) if isinstance(v, dict) and "__float__" in v else v for v in limit] \
        if isinstance(limit, (list, tuple)) else None
    if not bounds or len(bounds) != 2 or not all(isinstance(v, (int, float)) for v in bounds):
        raise ModelDirError("config.json", f"'time_step_limit' must be [min, max], found {limit!r}")
    return float(bounds[0]), float(bounds[1])


def mamba_dims(config: ModelConfig, inner: int | None = None) -> MambaDims:
    """The Mamba2 sizes from config.json; `inner` (Falcon-H1's mamba_d_ssm) overrides mamba_expand x hidden_size."""
    heads = size(config, "mamba_n_heads")
    inner = size(config, "mamba_expand") * config.hidden_size if inner is None else inner
    head_dim = config.raw.get("mamba_d_head", "auto")
    head_dim = inner // heads if head_dim == "auto" and heads else raw_int(config, "mamba_d_head")
    groups = size(config, "mamba_n_groups")
    if not heads or heads * head_dim != inner or not groups or heads % groups:
        raise ModelDirError("config.json", f"mamba_n_heads {heads} x mamba_d_head {head_dim} must equal the "
                                           f"Mamba2 inner size ({inner}), in groups of mamba_n_groups")
    low, high = time_step_limit(config)
    return MambaDims(heads, head_dim, groups, size(config, "mamba_d_state"), size(config, "mamba_d_conv"),
                     size(config, "mamba_chunk_size") or DEFAULTS["mamba_chunk_size"], low, high)


def mamba_plan(m: str, config: ModelConfig, dims: MambaDims | None = None) -> LayerPlan:
    dims, h = dims or mamba_dims(config), config.hidden_size
    plan: LayerPlan = {
        "ssm_in": [(m + "in_proj.weight", (dims.inner + dims.conv_dim + dims.heads, h))],   # z, xBC, dt
        "ssm_conv": [(m + "conv1d.weight", (dims.conv_dim, 1, dims.d_conv))],
        "A_log": [(m + "A_log", (dims.heads,))], "dt_bias": [(m + "dt_bias", (dims.heads,))],
        "D": [(m + "D", (dims.heads,))], "ssm_norm": [(m + "norm.weight", (dims.inner,))],
        "ssm_out": [(m + "out_proj.weight", (h, dims.inner))]}
    if config.raw.get("mamba_conv_bias", True):
        plan["ssm_conv_bias"] = [(m + "conv1d.bias", (dims.conv_dim,))]
    if config.raw.get("mamba_proj_bias", False):
        plan["ssm_in_bias"] = [(m + "in_proj.bias", (dims.inner + dims.conv_dim + dims.heads,))]
        plan["ssm_out_bias"] = [(m + "out_proj.bias", (h,))]
    return plan


def state_layout(dims: MambaDims) -> StateLayout:
    """What a Mamba2 layer keeps per sequence: the conv window and the SSM state."""
    return StateLayout((("conv", (dims.conv_dim, dims.d_conv - 1)), ("ssm", (dims.heads, dims.head_dim, dims.d_state))))
