"""MXFP4 experts (quant_method "mxfp4": gpt-oss as OpenAI released it; transformers Mxfp4HfQuantizer):

    <proj>_blocks  uint8 [experts, out, in / 32, 16]   two e2m1 codes a byte, the low nibble first
    <proj>_scales  uint8 [experts, out, in / 32]       E8M0: one power of two per 32 values, biased by 127

    W[e, o, 32 g + j] = E2M1[code j of blocks[e, o, g]] * 2 ** (scales[e, o, g] - 127)

The logical tensor is transformers' parameter `<proj>` ([experts, in, out]: the dequantized blocks
transposed, as transformers.integrations.mxfp4.convert_moe_packed_tensors returns them), so the engine reads
the same names from an MXFP4 checkpoint as from a bf16 one. Every value is exact in float32 (e2m1 times a
power of two). Only the MoE experts are quantized; attention, router, embeddings and lm_head stay float
(`modules_to_not_convert`), and the experts' biases are stored float beside the blocks.
"""
from __future__ import annotations

import torch

from reference_engine.files.quant.formats import disagree, part
from reference_engine.files.quant.module import QuantModule, decoded

GROUP = 32                 # values per scale (the MX block)
SCALE_BIAS = 127           # E8M0 exponent bias
BLOCKS, SCALES = "_blocks", "_scales"
# the 16 e2m1 codes: sign bit 3, exponent bits 2..1, mantissa bit 0
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def modules(raw, scheme, where):
    """(modules, hidden) for an mxfp4 declaration: one module per stored `<proj>_blocks`."""
    prefixes = [n[: -len(BLOCKS)] for n in raw.names if n.endswith(BLOCKS)]
    return [_module(raw, p) for p in prefixes if not scheme.excluded(p)], set()


def _module(raw, prefix: str) -> QuantModule:
    label = "mxfp4"
    blocks = _stored(raw, prefix, BLOCKS, 4, label)
    scales = _stored(raw, prefix, SCALES, 3, label)
    if blocks.shape[-1] != GROUP // 2:
        raise disagree(blocks, label, f"shape {list(blocks.shape)}: the last dimension holds {GROUP // 2} bytes "
                                      f"({GROUP} packed values)")
    if tuple(blocks.shape[:-1]) != tuple(scales.shape):
        raise disagree(scales, label, f"shape {list(scales.shape)}, expected {list(blocks.shape[:-1])} (one scale "
                                      f"per {GROUP} values of {prefix + BLOCKS})")
    experts, out_f, groups = scales.shape
    return decoded(prefix, (experts, groups * GROUP, out_f), {"blocks": blocks.name, "scales": scales.name},
                   lambda t: dequantize(t["blocks"], t["scales"]).transpose(1, 2), label, logical=prefix)


def _stored(raw, prefix: str, suffix: str, ndim: int, label: str):
    # the parts are "<proj>_blocks", not "<proj>.blocks": formats.part joins with a dot, so ask for the tail
    head, tail = prefix.rsplit(".", 1)
    return part(raw, head, tail + suffix, ("U8",), ndim, label)


def dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """blocks uint8 [..., groups, 16], scales uint8 [..., groups] -> float32 [..., groups * 32]."""
    lut = torch.tensor(E2M1, dtype=torch.float32)
    codes = torch.stack([blocks & 0x0F, blocks >> 4], dim=-1).long()          # [..., groups, 16, 2]: low first
    values = lut[codes].flatten(-2)                                            # [..., groups, 32]
    exponent = scales.to(torch.int32) - SCALE_BIAS                             # [..., groups]
    return torch.ldexp(values, exponent[..., None].float()).flatten(-2)
