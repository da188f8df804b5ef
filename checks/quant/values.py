"""Reading the small side tensors of a quantized module (zeros, scales, g_idx, a bitsandbytes quant state), one
module at a time: never a packed weight, never a dequantized copy. A tensor that cannot be read gives None
(the layout checks report why)."""
from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from reference_engine.errors import ModelDirError

MAX_SIDE_BYTES = 1 << 30        # a side tensor bigger than this is not a scale table: not read
MAX_STATE_BYTES = 1 << 16


def read(raw, name: str) -> torch.Tensor | None:
    if name not in raw:
        return None
    info = raw.info(name)
    if info.nbytes > MAX_SIDE_BYTES:
        return None
    try:
        return raw.get(name)
    except (ModelDirError, RuntimeError, ValueError):
        return None


def unpack(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """int32 words -> their 32/bits codes each, least significant first, along `dim` (bits 2, 4, 8)."""
    per = 32 // bits
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(per, dtype=torch.int64) * bits
    codes = (words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)       # [..., per]
    codes = codes.movedim(-1, dim + 1) if dim != packed.dim() - 1 else codes
    shape = list(packed.shape)
    shape[dim] *= per
    return codes.reshape(shape)


def stored_zero_values(raw, name: str, bits: int) -> torch.Tensor | None:
    """The distinct codes in a GPTQ qzeros tensor ([G, out*b/32], packed along out)."""
    packed = read(raw, name)
    if packed is None or packed.dim() != 2 or packed.dtype not in (torch.int32,) or 32 % bits:
        return None
    return torch.unique(unpack(packed, bits, 1))


@dataclass(frozen=True)
class ScaleStats:
    count: int
    nonfinite: int
    negative: int
    zero: int
    absmax: float


def scale_stats(raw, name: str) -> ScaleStats | None:
    t = read(raw, name)
    if t is None or not (t.is_floating_point()):
        return None
    x = t.float()
    finite = torch.isfinite(x)
    good = x[finite]
    return ScaleStats(x.numel(), int((~finite).sum()), int((good < 0).sum()), int((good == 0).sum()),
                      float(good.abs().max()) if good.numel() else 0.0)


def read_state(raw, name: str) -> dict | None:
    """A bitsandbytes `.quant_state.bitsandbytes__nf4` tensor: UTF-8 JSON bytes."""
    if name not in raw or raw.info(name).nbytes > MAX_STATE_BYTES:
        return None
    t = read(raw, name)
    if t is None:
        return None
    try:
        state = json.loads(bytes(t.view(torch.uint8).flatten().tolist()).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def g_idx_problems(g: torch.Tensor, in_features: int, n_groups: int, group_size: int | None,
                   desc_act: bool) -> list[str]:
    """What is wrong with a g_idx ([in] group of each input channel) for the declared grouping."""
    if g.dim() != 1 or g.numel() != in_features:
        return [f"has shape {list(g.shape)}, expected [{in_features}]"]
    g = g.to(torch.int64)
    low, high = int(g.min()), int(g.max())
    if low < 0 or high >= n_groups:
        bad = int(((g < 0) | (g >= n_groups)).sum())
        return [f"{bad} entries outside 0..{n_groups - 1} (min {low}, max {high}): dequantization reads scales "
                f"of groups that do not exist"]
    out = []
    if group_size and group_size > 0:
        counts = torch.bincount(g, minlength=n_groups)
        if int(counts.max()) > group_size:
            out.append(f"group {int(counts.argmax())} holds {int(counts.max())} channels, more than group_size "
                       f"{group_size}")
        trivial = torch.equal(g, torch.arange(in_features) // group_size)
        if not trivial and not desc_act:
            out.append("permutes input channels (act-order) but desc_act is false: kernels that trust desc_act "
                       "use i // group_size and dequantize with the wrong scales")
    return out
