"""Rotary position embeddings as a cos/sin table precomputed once for every position the model supports.

The inverse frequencies follow `transformers`' modeling_rope_utils formula for formula (default, linear,
dynamic, llama3, yarn), in float32 on the CPU, so that the table matches its values bit for bit; the table
is then moved to the engine's device and cast to its dtype. Looking a position up is an index, never a
recomputation, and a position past the table is an error rather than a silent wrap.

A rope block may also carry `freq_factors` (rotary_dim/2 numbers): llama.cpp's per-frequency divisors, which a
GGUF stores as the rope_freqs.weight tensor instead of Llama-3.1's rope_scaling metadata (files/gguf_config.py
puts them here). Every inverse frequency is divided by its factor after the type's own formula, as llama.cpp's
ggml_rope_ext divides each theta; so a GGUF's table is data, not a branch in any family.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from reference_engine.config import ModelConfig, partial_rotary_factor, rotary_width
from reference_engine.core.families.base import LAYER_KINDS   # re-exported: rope.LAYER_KINDS
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.limits import check_allocation, check_rope_table, rope_table_bytes

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")
# other names configs write for those: Phi-3's first name for LongRoPE; Qwen-VL's mrope, where text tokens carry
# one position in all three sections, which is plain RoPE (images are not run)
ROPE_TYPE_ALIASES = {"su": "longrope", "mrope": "default"}


def rope_parameters(config: ModelConfig, kind: str = "full_attention") -> dict:
    """The effective RoPE parameters: transformers 5 writes `rope_parameters` (with rope_theta inside; per
    layer kind for Gemma 3: {"full_attention": {...}, "sliding_attention": {...}}), older configs write
    top-level `rope_theta` plus an optional `rope_scaling` ({"type"|"rope_type", ...}) and, for Gemma 3's
    sliding layers, `rope_local_base_freq`."""
    raw = config.raw or {}
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and any(k in params for k in LAYER_KINDS):
        params = params.get(kind) or params.get("full_attention")
    elif kind == "sliding_attention":                  # Gemma 3 before transformers 5: no scaling locally
        plain = config.family is not None and config.family.settings.positions.local_rope_plain   # OLMo 3: same base
        base = raw.get("rope_theta", config.rope_theta) if plain else raw.get("rope_local_base_freq", 10000.0)
        params = {"rope_type": "default", "rope_theta": base}
    if not isinstance(params, dict):
        params = raw.get("rope_scaling") if isinstance(raw.get("rope_scaling"), dict) else config.rope_scaling
    params = dict(params or {})
    params.setdefault("rope_type", params.get("type", "default"))
    params["rope_type"] = ROPE_TYPE_ALIASES.get(params["rope_type"], params["rope_type"])
    if params.get("rope_theta") is None:
        params["rope_theta"] = raw.get("rope_theta", config.rope_theta)
    params["partial_rotary_factor"] = partial_rotary_factor(raw, config.head_dim, params)
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        params.setdefault("original_max_position_embeddings",
                          raw.get("original_max_position_embeddings", config.max_position_embeddings))
    return params


def rotary_dim(config: ModelConfig, params: dict) -> int:
    """Dimensions of each head that rotate (Phi-4-mini: partial_rotary_factor 0.75; the rest pass through)."""
    return rotary_width(config.raw or {}, config.head_dim, params)


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


def yarn_attention_factor(params: dict, factor: float) -> float:
    """The cos/sin scale of a yarn block as transformers reads it: attention_factor when given, else
    mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else 0.1 ln(factor) + 1."""
    attention_factor = params.get("attention_factor")
    if attention_factor is not None:
        return float(attention_factor)
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim))
    return _yarn_mscale(factor)


def softmax_mscale(config: ModelConfig) -> float:
    """transformers' yarn_apply_mscale (MLA: DeepSeek-V2/V3, Kimi K2): the attention softmax scale is multiplied by
    mscale(factor, mscale_all_dim) ** 2 when the rope type is not default and mscale_all_dim is set (it scales
    the non-rotary dims too; `mscale` itself only enters the cos/sin attention factor); else 1."""
    params = rope_parameters(config)
    all_dim = params.get("mscale_all_dim") or 0
    if params.get("rope_type", "default") == "default" or not all_dim:
        return 1.0
    factor = params.get("factor") or config.max_position_embeddings / params["original_max_position_embeddings"]
    mscale = _yarn_mscale(factor, all_dim)
    return mscale * mscale


def _yarn(base: float, dim: int, params: dict, config: ModelConfig) -> tuple[torch.Tensor, float]:
    original_max = params["original_max_position_embeddings"]
    factor = params.get("factor")
    if factor is None:
        factor = config.max_position_embeddings / original_max
    attention_factor = yarn_attention_factor(params, factor)
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


def dynamic_inv_freq(params: dict, dim: int, max_pos: int, seq_len: int) -> torch.Tensor:
    """Dynamic NTK: the base grows with the sequence once it is longer than max_position_embeddings. Computed
    in float32 tensors from an int64 length, step for step as transformers' _compute_dynamic_ntk_parameters."""
    factor = params["factor"]
    length = torch.maximum(torch.tensor(seq_len), torch.tensor(max_pos))
    base = params["rope_theta"] * ((factor * length / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def _longrope(params: dict, dim: int, config: ModelConfig, path: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    """LongRoPE (Phi-3): (short inv_freq, long inv_freq, attention factor); the long factors apply to a whole
    step once it reaches past original_max_position_embeddings."""
    original = params["original_max_position_embeddings"]
    factor = params.get("factor") or config.max_position_embeddings / original
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    short, long = (torch.tensor(_need(params, key, path), dtype=torch.float32)
                   for key in ("short_factor", "long_factor"))
    if short.numel() != dim // 2 or long.numel() != dim // 2:
        raise ModelDirError(path, f"longrope short_factor/long_factor need {dim // 2} values each "
                                  f"(found {short.numel()} and {long.numel()})")
    base = params["rope_theta"]
    return 1.0 / (short * base ** shape), 1.0 / (long * base ** shape), float(attention)


def freq_factors(params: dict, dim: int, path: str) -> torch.Tensor | None:
    """The block's llama.cpp frequency factors as float32 [dim/2], or None; wrong length or a factor that is not
    a positive finite number is a ModelDirError (llama.cpp refuses such a rope_freqs tensor too)."""
    values = params.get("freq_factors")
    if values is None:
        return None
    try:
        factors = torch.tensor(values, dtype=torch.float32).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise ModelDirError(path, f"rope freq_factors must be a list of numbers, found {str(values)[:60]}") from None
    if factors.numel() != dim // 2:
        raise ModelDirError(path, f"rope freq_factors (rope_freqs.weight) has {factors.numel()} values; "
                                  f"rotary dimension {dim} needs {dim // 2}")
    if not (torch.isfinite(factors).all() and (factors > 0).all()):
        raise ModelDirError(path, "rope freq_factors (rope_freqs.weight) must be positive finite numbers")
    return factors


def _divided(inv_for: Callable[[int], torch.Tensor], factors: torch.Tensor | None) -> Callable[[int], torch.Tensor]:
    return inv_for if factors is None else (lambda seq_len: inv_for(seq_len) / factors)


def inverse_frequencies(config: ModelConfig, path: str = "config.json",
                        kind: str = "full_attention") -> tuple[torch.Tensor, float]:
    """(inv_freq [rotary_dim/2] float32, attention_scaling) for the config's RoPE type, divided by the block's
    freq_factors when it has them."""
    params = rope_parameters(config, kind)
    inv_freq, scaling = _type_inverse_frequencies(config, params, path)
    factors = freq_factors(params, rotary_dim(config, params), path)
    return (inv_freq if factors is None else inv_freq / factors), scaling


def _type_inverse_frequencies(config: ModelConfig, params: dict, path: str) -> tuple[torch.Tensor, float]:
    rope_type = params["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise UnsupportedError(path, f"rope_scaling type {rope_type!r} is not supported "
                                     f"(supported: {', '.join(ROPE_TYPES)})")
    base, dim = params["rope_theta"], rotary_dim(config, params)
    if dim % 2 or dim < 2:
        raise ModelDirError(path, f"rotary dimension {dim} is odd; RoPE rotates pairs of dimensions")
    if rope_type == "yarn":
        return _yarn(base, dim, params, config)
    if rope_type == "longrope":
        short, _, attention = _longrope(params, dim, config, path)
        return short, attention
    if rope_type == "dynamic":
        # NTK scaling only grows the base once a step reaches past max_position_embeddings (RopeTable.lookup
        # then computes that step's rows); up to there the formula gives the plain base (factor term = 1)
        _need(params, "factor", path)
        return dynamic_inv_freq(params, dim, config.max_position_embeddings, config.max_position_embeddings), 1.0
    inv_freq = _base_inv_freq(base, dim)
    if rope_type == "linear":
        inv_freq = inv_freq / _need(params, "factor", path)
    elif rope_type == "llama3":
        inv_freq = _llama3(inv_freq, params, path)
    return inv_freq, 1.0


# rows built up front; more are built as positions reach them, up to max_position_embeddings. A whole table is
# 8 bytes x rotary_dim per position: 1 GiB for a 2^20-position model (Granite 4-H's GGUF) whatever its use.
INITIAL_ROWS = 1 << 15


@dataclass
class RopeTable:
    cos: torch.Tensor   # [rows built, rotary_dim] in the engine dtype, on the engine device
    sin: torch.Tensor   # [rows built, rotary_dim]
    attention_scaling: float
    rope_type: str
    # how a step whose last position is past a threshold gets rows the table does not hold:
    # (threshold, inv_freq_for(seq_len) -> [rotary_dim/2]); dynamic NTK and LongRoPE's long factors
    beyond: tuple[int, Callable[[int], torch.Tensor]] | None = None
    local: "RopeTable | None" = None    # Gemma 3: the sliding layers' table (lookup returns both, stacked)
    # LongRoPE: past this length a sequence's K/V must all be computed with the long factors, so the engine
    # recomputes a sequence whose step crosses it (transformers' Phi-3 generate drops its cache there)
    restart_at: int | None = None
    limit: int = 0      # the positions the model allows (max_position_embeddings); 0: the rows built
    rows_for: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]] | None = None   # rows [start, stop)

    @property
    def max_positions(self) -> int:
        return self.limit or self.cos.shape[0]

    def reach(self, top: int) -> None:
        """Build the rows up to position `top` (doubling, at most to max_positions) if they are not built yet."""
        built = self.cos.shape[0]
        if top < built or self.rows_for is None or built >= self.max_positions:
            return
        stop = min(self.max_positions, max(top + 1, 2 * built))
        cos, sin = self.rows_for(built, stop)
        self.cos, self.sin = torch.cat([self.cos, cos]), torch.cat([self.sin, sin])

    @property
    def unbounded(self) -> bool:
        """Dynamic NTK: positions past the table are computed, as transformers does, not refused."""
        return self.rope_type == "dynamic"

    def lookup(self, positions: torch.Tensor, check: bool = True,
               ends: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [num_tokens, rotary_dim] for positions [num_tokens] ([2, num_tokens, rotary_dim]: global
        and local rows, with a local table). check=False skips the bounds test (a device sync) for callers
        that checked on the host already. ends [num_tokens] (CPU): the length each token's sequence reaches
        in this step, which picks LongRoPE's factors and dynamic NTK's base per sequence (without it the
        whole step counts as one sequence, max(positions) + 1 long, as in transformers' forward)."""
        if check and positions.numel() and not self.unbounded:
            top = int(positions.max())
            if top >= self.max_positions or int(positions.min()) < 0:
                raise ValueError(f"position {top} is outside the RoPE table "
                                 f"(max_position_embeddings = {self.max_positions})")
        cos, sin = self._rows(positions, ends)
        if self.local is not None:
            local_cos, local_sin = self.local._rows(positions, ends)
            return torch.stack([cos, local_cos]), torch.stack([sin, local_sin])
        return cos, sin

    def _rows(self, positions: torch.Tensor, ends: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if positions.numel() and self.cos.shape[0] < self.max_positions:   # a sync only while rows are missing
            self.reach(min(int(positions.max()), self.max_positions - 1))
        if self.beyond is None or not positions.numel():
            return self.cos[positions], self.sin[positions]
        threshold, inv_freq_for = self.beyond
        if ends is None:                                # transformers: max(position_ids) + 1 of the step
            ends = torch.full((positions.numel(),), int(positions.max()) + 1, dtype=torch.int64)
        past = sorted(set(ends[ends > threshold].tolist()))
        if not past:
            return self.cos[positions], self.sin[positions]
        inside = positions.clamp(max=self.max_positions - 1)   # dynamic NTK: rows past the table are all computed
        cos, sin, host = self.cos[inside], self.sin[inside], positions.cpu()
        for seq_len in past:                            # one group per sequence length past the threshold
            rows = (ends == seq_len).nonzero().flatten()
            c, s = rope_rows(host[rows], inv_freq_for(seq_len), self.attention_scaling, cos.device, cos.dtype)
            rows = rows.to(cos.device)
            cos[rows], sin[rows] = c, s
        return cos, sin

    def validate(self, max_position: int | None = None) -> list[str]:
        problems = []
        if max_position is not None and max_position >= self.max_positions and not self.unbounded:
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


def rope_rows(positions: torch.Tensor, inv_freq: torch.Tensor, scaling: float, device,
              dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [len(positions), rotary_dim] computed in float32 on the CPU (as the table is)."""
    freqs = positions.to(torch.int64).float()[:, None] * inv_freq[None, :]   # [P, rot/2], fp32 like transformers
    emb = torch.cat((freqs, freqs), dim=-1)                                 # [P, rot]
    cos, sin = emb.cos() * scaling, emb.sin() * scaling
    return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)


def build_rope_table(config: ModelConfig, device="cpu", dtype=torch.float32, path: str = "config.json",
                     kind: str = "full_attention") -> RopeTable:
    inv_freq, scaling = inverse_frequencies(config, path, kind)
    params = rope_parameters(config, kind)
    limit = config.max_position_embeddings
    check_rope_table(min(limit, INITIAL_ROWS), config.head_dim, path)   # refuse before allocating

    def rows_for(start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        check_allocation("the RoPE table", rope_table_bytes(stop - start, config.head_dim), path,
                         f"positions {start}..{stop - 1} of max_position_embeddings {limit} x head_dim "
                         f"{config.head_dim}")
        return rope_rows(torch.arange(start, stop), inv_freq, scaling, device, dtype)
    cos, sin = rows_for(0, min(limit, INITIAL_ROWS))
    beyond = None
    dim, factors = rotary_dim(config, params), freq_factors(params, rotary_dim(config, params), path)
    if params["rope_type"] == "dynamic":
        max_pos = config.max_position_embeddings
        beyond = (max_pos, _divided(lambda seq_len: dynamic_inv_freq(params, dim, max_pos, seq_len), factors))
    elif params["rope_type"] == "longrope":
        long = _longrope(params, dim, config, path)[1]
        beyond = (params["original_max_position_embeddings"], _divided(lambda seq_len: long, factors))
    local = None
    if kind == "full_attention" and config.family is not None and config.family.settings.positions.local_rope:
        local = build_rope_table(config, device, dtype, path, "sliding_attention")
    restart_at = beyond[0] if params["rope_type"] == "longrope" else None
    return RopeTable(cos, sin, scaling, params["rope_type"], beyond, local, restart_at, limit, rows_for)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [num_tokens, heads, head_dim]; cos/sin [num_tokens, rotary_dim]. With a partial rotary dimension
    (rotary_dim < head_dim) only the first rotary_dim features of each head rotate, as in transformers."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    rot = cos.shape[-1]
    if rot < x.shape[-1]:
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        return torch.cat([(x_rot * cos) + (rotate_half(x_rot) * sin), x_pass], dim=-1)
    return (x * cos) + (rotate_half(x) * sin)
