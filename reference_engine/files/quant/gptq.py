"""GPTQ (AutoGPTQ / GPTQModel / optimum), per linear module:

    qweight int32 [in * bits / 32, out]   packed along in, LSB first (3 bits straddle words)
    qzeros  int32 [groups, out * bits / 32] packed along out
    scales  f16   [groups, out]
    g_idx   int32 [in]                    group of each input column (default i // group_size)

    W[o, i] = scales[g_idx[i], o] * (q[i, o] - z[g_idx[i], o])
    z = stored + 1 for checkpoint_format "gptq" (v1; AutoGPTQ stores z - 1), z = stored for "gptq_v2".

Sources: AutoGPTQ nn_modules/qlinear/qlinear_cuda_old.py (pack, forward's dequantization), GPTQModel
utils/model.py (v1 <-> v2), vLLM model_executor/layers/quantization/gptq.py.
"""
from __future__ import annotations

import torch

from reference_engine.files.quant.formats import (
    FLOATS,
    check_groups,
    disagree,
    part,
    stored_prefixes,
)
from reference_engine.files.quant.module import QuantModule, decoded
from reference_engine.files.quant.packing import unpack_int32, words_for


def modules(raw, scheme, where):
    """(modules, hidden) for a GPTQ declaration (declaration.py has checked bits, group_size, the format)."""
    bits, group_size = scheme.bits, scheme.group_size
    label = f"gptq {bits}-bit g{group_size}{' v2' if scheme.fmt == 'gptq_v2' else ''}"
    out = [_module(raw, prefix, bits, group_size, scheme.fmt == "gptq", label)
           for prefix in stored_prefixes(raw, ".qweight")]
    return out, set()


def _module(raw, prefix: str, bits: int, group_size: int, v1: bool, scheme: str) -> QuantModule:
    qweight = part(raw, prefix, "qweight", ("I32",), 2, scheme)
    qzeros = part(raw, prefix, "qzeros", ("I32",), 2, scheme)
    scales = part(raw, prefix, "scales", FLOATS, 2, scheme)
    parts = {"qweight": qweight.name, "qzeros": qzeros.name, "scales": scales.name}
    if qweight.shape[0] * 32 % bits:
        raise disagree(qweight, scheme, f"{qweight.shape[0]} packed rows do not hold whole {bits}-bit values")
    in_f, (groups, out_f) = qweight.shape[0] * 32 // bits, scales.shape
    if qweight.shape[1] != out_f:
        raise disagree(qweight, scheme, f"shape {list(qweight.shape)} disagrees with scales {list(scales.shape)}")
    want = 1 if group_size == -1 else -(-in_f // group_size)
    if groups != want:
        raise disagree(scales, scheme, f"{groups} groups, but {in_f} inputs ({qweight.shape[0]} packed rows of "
                                       f"{bits}-bit values) in groups of {group_size} make {want}")
    if tuple(qzeros.shape) != (groups, words_for(out_f, bits)):
        raise disagree(qzeros, scheme, f"shape {list(qzeros.shape)}, expected {[groups, words_for(out_f, bits)]}")
    if f"{prefix}.g_idx" in raw:
        g_idx = part(raw, prefix, "g_idx", ("I32", "I64"), 1, scheme)
        if tuple(g_idx.shape) != (in_f,):
            raise disagree(g_idx, scheme, f"shape {list(g_idx.shape)}, expected [{in_f}]")
        check_groups(raw, g_idx, groups, scheme)     # [in] int32: read now, so a bad index fails the open
        parts["g_idx"] = g_idx.name
    gs = in_f if group_size == -1 else group_size

    def dequant(t: dict[str, torch.Tensor]) -> torch.Tensor:
        g = t["g_idx"].long() if "g_idx" in t else torch.arange(in_f) // gs
        z = unpack_int32(t["qzeros"], bits, out_f, 1) + (1 if v1 else 0)   # [groups, out]
        w = unpack_int32(t["qweight"], bits, in_f, 0).T.float()            # [out, in] (in place from here)
        w.sub_(z.T.float()[:, g])
        return w.mul_(t["scales"].T.float()[:, g])

    return decoded(prefix, (out_f, in_f), parts, dequant, scheme,
                       {"bits": bits, "group_size": group_size, "v1": v1})
