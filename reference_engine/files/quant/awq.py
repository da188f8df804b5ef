"""AWQ, GEMM layout (AutoAWQ WQLinear_GEMM), per linear module:

    qweight int32 [in, out / 8]       packed along out, nibble k of a word holds column AWQ_ORDER[k]
    qzeros  int32 [in / G, out / 8]   same packing
    scales  f16   [in / G, out]

    W[o, i] = (q[i, o] - z[i // G, o]) * scales[i // G, o]      (no +1, unlike GPTQ v1)

Sources: AutoAWQ awq/modules/linear/gemm.py (from_linear packing), awq/utils/packing_utils.py (unpack,
AWQ_REVERSE_ORDER), transformers integrations/awq.py (config keys).
"""
from __future__ import annotations

import torch

from reference_engine.files.quant.formats import FLOATS, disagree, part, stored_prefixes
from reference_engine.files.quant.module import QuantModule, decoded
from reference_engine.files.quant.packing import unpack_int32

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)          # column of nibble k, as from_linear packs
AWQ_REVERSE_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)  # nibble of column j


def modules(raw, scheme, where):
    """(modules, hidden) for an AWQ declaration (declaration.py: 4 bits, GEMM-packed versions, zero points)."""
    bits, group_size = scheme.bits, scheme.group_size
    label = f"awq {bits}-bit g{group_size} {scheme.fmt}"
    prefixes = [p for p in stored_prefixes(raw, ".qweight") if not scheme.excluded(p)]
    return [_module(raw, prefix, bits, group_size, label) for prefix in prefixes], set()


def _module(raw, prefix: str, bits: int, group_size: int, scheme: str) -> QuantModule:
    qweight = part(raw, prefix, "qweight", ("I32",), 2, scheme)
    qzeros = part(raw, prefix, "qzeros", ("I32",), 2, scheme)
    scales = part(raw, prefix, "scales", FLOATS, 2, scheme)
    in_f, out_f = qweight.shape[0], qweight.shape[1] * 32 // bits
    gs = in_f if group_size == -1 else group_size
    if in_f % gs:
        raise disagree(qweight, scheme, f"{in_f} inputs do not split into groups of {gs}")
    groups = in_f // gs
    if tuple(scales.shape) != (groups, out_f):
        raise disagree(scales, scheme, f"shape {list(scales.shape)}, expected {[groups, out_f]} "
                                       f"(qweight {list(qweight.shape)}, group_size {group_size})")
    if tuple(qzeros.shape) != (groups, qweight.shape[1]):
        raise disagree(qzeros, scheme, f"shape {list(qzeros.shape)}, expected {[groups, qweight.shape[1]]}")
    reverse = torch.tensor(AWQ_REVERSE_ORDER)

    def unpack(packed: torch.Tensor) -> torch.Tensor:                  # [rows, out / 8] -> [rows, out]
        nibbles = unpack_int32(packed, bits, out_f, 1)                  # word order: nibble k at column 8w + k
        return nibbles.unflatten(1, (-1, 8))[..., reverse].flatten(1)

    def dequant(t: dict[str, torch.Tensor]) -> torch.Tensor:
        g = torch.arange(in_f) // gs
        w = unpack(t["qweight"]).T.float()                              # [out, in] (in place from here)
        w.sub_(unpack(t["qzeros"]).T.float()[:, g])
        return w.mul_(t["scales"].T.float()[:, g])

    return decoded(prefix, (out_f, in_f),
                       {"qweight": qweight.name, "qzeros": qzeros.name, "scales": scales.name}, dequant, scheme)
