"""ggml's MXFP4 (GGMLQuantizationType 39, block_mxfp4: what convert_hf_to_gguf writes for gpt-oss's experts),
dequantized in torch, exactly:

    block (17 bytes, 32 values)  byte 0: E8M0 scale e;  bytes 1..16: byte j holds value j (low nibble) and
                                 value j + 16 (high nibble), each an e2m1 code
    value = e2m1[code] * 2 ** (e - 127)

ggml writes it as kvalues_mxfp4 (the e2m1 values doubled) times half the scale (ggml_e8m0_to_fp32_half): the
same numbers. The layout differs from the Hugging Face checkpoints' (files/quant/mxfp4.py: low nibble = value
2i, high = 2i + 1; scales in a tensor of their own): the converter reorders the nibbles and puts each scale in
front of its block. Every value is exact in float32 (an e2m1 value times a power of two, 2 ** -128 at the
least), so a GGUF's experts equal the safetensors checkpoint's dequantized ones bit for bit; scaled as ggml
does (doubled value times 2 ** (e - 128)), so e = 255 (NaN in the OCP spec) gives ggml's numbers too (0 stays
0, no 0 * inf). Own kernel rather
than gguf's numpy one: no numpy scratch, and gguf packages before MXFP4 existed read the file too.
"""
from __future__ import annotations

import torch

# ggml's own constants (ggml-common.h QK_MXFP4, kvalues_mxfp4; files/quant/mxfp4.py has the OCP table, halved:
# reference_engine.files may not import its quant subpackage, which imports it)
GROUP = 32                        # values per block
SCALE_BIAS = 127                  # E8M0 exponent bias
KVALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)   # e2m1 code -> value * 2
BLOCK_BYTES = 1 + GROUP // 2      # the scale byte, then 16 bytes of codes
CHUNK_VALUES = 1 << 22            # values dequantized per step


def dequantize_mxfp4(raw: torch.Tensor, cols: int) -> torch.Tensor:
    """raw uint8 [rows, cols / 32 * 17] -> float32 [rows, cols], CHUNK_VALUES at a time (the int64 codes of a
    chunk are twice its float32 output: a whole 120B expert tensor at once would be ~8 GB of them)."""
    if cols % GROUP or raw.shape[-1] != cols // GROUP * BLOCK_BYTES:
        raise ValueError(f"MXFP4 rows of {raw.shape[-1]} bytes do not hold {cols} values in blocks of {GROUP}")
    rows = raw.shape[0]
    out = torch.empty(rows, cols, dtype=torch.float32)
    lut = torch.tensor(KVALUES, dtype=torch.float32)                       # e2m1 values doubled
    step = max(1, CHUNK_VALUES // cols)
    for a in range(0, rows, step):
        blocks = raw[a:a + step].reshape(-1, cols // GROUP, BLOCK_BYTES)   # [n, groups, 17]
        scale, codes = blocks[..., 0], blocks[..., 1:]                     # [n, groups], [n, groups, 16]
        codes = torch.cat([codes & 0x0F, codes >> 4], dim=-1).long()      # [n, groups, 32]: values 0..15, 16..31
        exponent = scale.to(torch.int32) - SCALE_BIAS - 1                  # [n, groups]: half the scale
        out[a:a + step] = torch.ldexp(lut[codes], exponent[..., None].float()).reshape(-1, cols)
    return out


# ggml type name -> torch kernel (raw uint8 [rows, row bytes], row length) used before gguf's numpy kernels
TORCH_KERNELS = {"MXFP4": dequantize_mxfp4}
