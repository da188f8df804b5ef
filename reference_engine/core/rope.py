"""Rotary position embeddings as a cos/sin table precomputed once for every position the model supports.

The inverse frequencies follow `transformers`' modeling_rope_utils formula for formula (default, linear,
dynamic, llama3, yarn), in float32 on the CPU, so that the table matches its values bit for bit; the table
is then moved to the engine's device and cast to its dtype. Looking a position up is an index, never a
recomputation, and a position past the table is an error rather than a silent wrap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from reference_engine.config import ModelConfig
from reference_engine.errors import ModelDirError, UnsupportedError

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


def rope_parameters(config: ModelConfig) -> dict:
    """The effective RoPE parameters: transformers 5 writes `rope_parameters` (with rope_theta inside),
    older configs write top-level `rope_theta` plus an optional `rope_scaling` ({"type"|"rope_type", ...})."""
    raw = config.raw or {}
    params = raw.get("rope_parameters")
    if not isinstance(params, dict):
        params = raw.get("rope_scaling") if isinstance(raw.get("rope_scaling"), dict) else config.rope_scaling
    params = dict(params or {})
    params.setdefault("rope_type", params.get("type", "default"))
    if params.get("rope_theta") is None:
        params["rope_theta"] = raw.get("rope_theta", config.rope_theta)
    if params["rope_type"] in ("llama3", "yarn"):
        params.setdefault("original_max_position_embeddings",
                          raw.get("original_max_position_embeddings", config.max_position_embeddings))
    return params


def _base_inv_freq(base: float, dim: int) -> torch.Tensor:
    # [dim/2]; integer arange cast to float, exactly as transformers does
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def _need(params: dict, key: str, path: str):
    if params.get(key) is None:
        raise ModelDirError(path, f"rope_scaling type {params['rope_type']!r} needs '{key}'")
    return params[key]


def _llama3(inv_freq: torch.Tensor, params: dict, path: str) -> torch.Tensor:
    factor = _need(params, "factor", path)
    low_freq_factor = _need(params, "low_freq_factor", path)
    high_freq_factor = _need(params, "high_freq_factor", path)
    old_context_len = params["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # long wavelengths are interpolated by `factor`, short ones kept, the band between blended smoothly
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(base: float, dim: int, params: dict, config: ModelConfig) -> tuple[torch.Tensor, float]:
    original_max = params["original_max_position_embeddings"]
    factor = params.get("factor")
    if factor is None:
        factor = config.max_position_embeddings / original_max
    attention_factor = params.get("attention_factor")
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim))
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(original_max / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a division by zero in the ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrapolation_weight = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq, float(attention_factor)


def inverse_frequencies(config: ModelConfig, path: str = "config.json") -> tuple[torch.Tensor, float]:
    """(inv_freq [head_dim/2] float32, attention_scaling) for the config's RoPE type."""
    params = rope_parameters(config)
    rope_type = params["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise UnsupportedError(path, f"rope_scaling type {rope_type!r} is not supported "
                                     f"(supported: {', '.join(ROPE_TYPES)})")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedError(path, "partial_rotary_factor != 1 is not supported")
    base, dim = params["rope_theta"], config.head_dim
    if dim % 2:
        raise ModelDirError(path, f"head_dim {dim} is odd; RoPE rotates pairs of dimensions")
    if rope_type == "yarn":
        return _yarn(base, dim, params, config)
    if rope_type == "dynamic":
        # NTK scaling only grows the base once a sequence is longer than max_position_embeddings; the table
        # stops there, so we evaluate transformers' formula at seq_len = max_position_embeddings (factor ~ 1).
        factor, max_pos = _need(params, "factor", path), config.max_position_embeddings
        base = base * ((factor * max_pos / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = _base_inv_freq(base, dim)
    if rope_type == "linear":
        inv_freq = inv_freq / _need(params, "factor", path)
    elif rope_type == "llama3":
        inv_freq = _llama3(inv_freq, params, path)
    return inv_freq, 1.0


@dataclass
class RopeTable:
    cos: torch.Tensor   # [max_positions, head_dim] in the engine dtype, on the engine device
    sin: torch.Tensor   # [max_positions, head_dim]
    attention_scaling: float
    rope_type: str

    @property
    def max_positions(self) -> int:
        return self.cos.shape[0]

    def lookup(self, positions: torch.Tensor, check: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [num_tokens, head_dim] for positions [num_tokens]; positions must be inside the table.
        check=False skips the bounds test (a device sync) for callers that checked on the host already."""
        if check and positions.numel():
            top = int(positions.max())
            if top >= self.max_positions or int(positions.min()) < 0:
                raise ValueError(f"position {top} is outside the RoPE table "
                                 f"(max_position_embeddings = {self.max_positions})")
        return self.cos[positions], self.sin[positions]

    def validate(self, max_position: int | None = None) -> list[str]:
        problems = []
        if max_position is not None and max_position >= self.max_positions:
            problems.append(f"RoPE table covers positions 0..{self.max_positions - 1}, "
                            f"position {max_position} was requested")
        if not (torch.isfinite(self.cos).all() and torch.isfinite(self.sin).all()):
            problems.append("RoPE cos/sin table contains non-finite values")
        else:
            norm = (self.cos.float() ** 2 + self.sin.float() ** 2).sqrt()
            expected = self.attention_scaling
            if (norm - expected).abs().max() > 1e-2 * max(expected, 1.0):
                problems.append(f"RoPE table rows do not have norm {expected:g} (cos^2 + sin^2 is off)")
        return problems


def build_rope_table(config: ModelConfig, device="cpu", dtype=torch.float32,
                     path: str = "config.json") -> RopeTable:
    inv_freq, scaling = inverse_frequencies(config, path)
    positions = torch.arange(config.max_position_embeddings, dtype=torch.int64).float()
    freqs = positions[:, None] * inv_freq[None, :]     # [max_pos, head_dim/2], fp32 like transformers
    emb = torch.cat((freqs, freqs), dim=-1)            # [max_pos, head_dim]
    cos, sin = emb.cos() * scaling, emb.sin() * scaling
    return RopeTable(cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype),
                     scaling, rope_parameters(config)["rope_type"])


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [num_tokens, heads, head_dim]; cos/sin [num_tokens, head_dim]."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    return (x * cos) + (rotate_half(x) * sin)
