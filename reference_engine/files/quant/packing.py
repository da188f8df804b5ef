"""Integer unpacking shared by the quantized formats: a dense little-endian bit stream in int32 words.

GPTQ (AutoGPTQ's pack, 3 bits included: values straddle words), compressed-tensors' pack_to_int32 (any of
1..8 bits) and the natural order of AWQ's words all store element k of a packed row at bits k*b .. k*b+b-1
of the row's stream, LSB first. Widths dividing 32 unpack with shifts; others through the row's bits.
"""
from __future__ import annotations

import torch


def unpack_int32(packed: torch.Tensor, bits: int, count: int, dim: int) -> torch.Tensor:
    """packed int32 [..., words, ...] along `dim` -> unsigned values (int32) with `count` entries along dim."""
    x = packed.movedim(dim, -1)                                             # [..., words]
    if 32 % bits == 0:
        shifts = torch.arange(0, 32, bits, dtype=torch.int32)
        vals = (x.unsqueeze(-1) >> shifts).bitwise_and_((1 << bits) - 1)    # [..., words, 32 / bits]
        vals = vals.flatten(-2)
    else:
        stream = (x.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1   # [..., words, 32] bits
        stream = stream.flatten(-2)
        n = stream.shape[-1] // bits
        weights = 1 << torch.arange(bits, dtype=torch.int32)
        vals = (stream[..., :n * bits].unflatten(-1, (n, bits)) * weights).sum(-1, dtype=torch.int32)
    if vals.shape[-1] < count:
        raise ValueError(f"{packed.shape[dim]} packed words hold {vals.shape[-1]} values of {bits} bits, "
                         f"{count} expected")
    return vals[..., :count].movedim(-1, dim)


def words_for(count: int, bits: int) -> int:
    """int32 words a dense stream of `count` values of `bits` bits fills."""
    return -(-count * bits // 32)
