"""bitsandbytes 4-bit (quant_method "bitsandbytes", load_in_4bit; NF4 or FP4), per linear module, as
Linear4bit saves its QuantState:

    weight                               uint8 [n / 2, 1]  two codes a byte, the first in the high nibble
    weight.absmax                        f32 [blocks]    (double quant: uint8 codes of the absmax)
    weight.quant_map                     f32 [16]        the code book (NF4 or FP4 values)
    weight.nested_absmax / nested_quant_map              double quant: absmax = nested_quant_map[code]
                                                         * nested_absmax[block / nested_blocksize] + nested_offset
    weight.quant_state.bitsandbytes__nf4 uint8 JSON {quant_type, blocksize, dtype, shape, nested_*}

    W.flat[k] = quant_map[code[k]] * absmax[k // blocksize]

Sources: bitsandbytes/functional.py (QuantState.from_dict, dequantize_4bit, dequantize_blockwise),
bitsandbytes/nn/modules.py (Linear4bit._save_to_state_dict), transformers integrations/bitsandbytes.py.
"""
from __future__ import annotations

import json
import math

import torch

from reference_engine.errors import ModelDirError
from reference_engine.files.quant.formats import disagree, part
from reference_engine.files.quant.module import QuantModule, decoded

STATE_SUFFIXES = (".quant_state.bitsandbytes__nf4", ".quant_state.bitsandbytes__fp4")


def modules(raw, scheme, where):
    """(modules, hidden) for a bitsandbytes 4-bit declaration (declaration.py refuses 8-bit); the quant type
    and block size of each module come from its stored quant_state."""
    out, hidden = [], set()
    for name in raw.names:
        for suffix in STATE_SUFFIXES:
            if name.endswith(suffix):
                weight = name[: -len(suffix)]
                if not scheme.excluded(weight[: -len(".weight")]):
                    out.append(_module(raw, weight, suffix, where))
                    hidden.add(name)      # read once, when the table opens
    return out, hidden


def _state(raw, weight: str, suffix: str, where) -> dict:
    info = raw.info(weight + suffix)
    if info.dtype != "U8" or len(info.shape) != 1 or info.nbytes > 1 << 16:
        raise ModelDirError(info.file, f"{info.name}: expected a small uint8 JSON tensor")
    try:
        state = json.loads(bytes(raw.get(info.name).tolist()).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(info.file, f"{info.name}: not JSON ({e})") from None
    if not isinstance(state, dict):
        raise ModelDirError(info.file, f"{info.name}: not a JSON object")
    return state


def _module(raw, weight: str, suffix: str, where) -> QuantModule:
    state = _state(raw, weight, suffix, where)
    prefix = weight[: -len(".weight")]
    qtype, blocksize, shape = state.get("quant_type"), state.get("blocksize"), state.get("shape")
    scheme = f"bitsandbytes {qtype}"
    info = raw.info(weight + suffix)
    if qtype not in ("nf4", "fp4") or suffix != f".quant_state.bitsandbytes__{qtype}":
        raise disagree(info, scheme, f"quant_type {qtype!r} disagrees with the tensor name")
    if not (isinstance(blocksize, int) and 16 <= blocksize <= 4096 and blocksize & (blocksize - 1) == 0):
        raise disagree(info, scheme, f"blocksize {blocksize!r} is not a power of two in 16..4096")
    if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(d, int) and 0 < d < 1 << 31
                                                                 for d in shape)):
        raise disagree(info, scheme, f"shape {shape!r} is not [out, in]")
    n = shape[0] * shape[1]
    packed = part(raw, prefix, "weight", ("U8",), (1, 2), scheme)
    if math.prod(packed.shape) != -(-n // 2):
        raise disagree(packed, scheme, f"{math.prod(packed.shape)} bytes, but a {shape} weight packs into {-(-n // 2)}")
    blocks = -(-n // blocksize)
    nested = "nested_blocksize" in state
    absmax = part(raw, weight, "absmax", ("U8",) if nested else ("F32", "F16", "BF16"), 1, scheme)
    quant_map = part(raw, weight, "quant_map", ("F32",), 1, scheme)
    if absmax.shape[0] != blocks:
        raise disagree(absmax, scheme, f"{absmax.shape[0]} entries, but {n} values in blocks of {blocksize} "
                                       f"make {blocks}")
    if quant_map.shape[0] != 16:
        raise disagree(quant_map, scheme, f"{quant_map.shape[0]} code book entries, expected 16")
    parts = {"weight": packed.name, "absmax": absmax.name, "quant_map": quant_map.name}
    if nested:
        nb, offset = state.get("nested_blocksize"), state.get("nested_offset", 0.0)
        if not (isinstance(nb, int) and nb > 0) or not isinstance(offset, (int, float)):
            raise disagree(info, scheme, f"nested_blocksize {nb!r} / nested_offset {offset!r} are not numbers")
        n_absmax = part(raw, weight, "nested_absmax", ("F32",), 1, scheme)
        n_map = part(raw, weight, "nested_quant_map", ("F32",), 1, scheme)
        if n_absmax.shape[0] != -(-blocks // nb) or n_map.shape[0] != 256:
            raise disagree(n_absmax, scheme, f"nested_absmax {list(n_absmax.shape)} / nested_quant_map "
                                             f"{list(n_map.shape)}, expected [{-(-blocks // nb)}] / [256]")
        parts.update(nested_absmax=n_absmax.name, nested_quant_map=n_map.name)

    def dequant(t):
        b = t["weight"].flatten()
        codes = torch.stack((b >> 4, b & 0xF), -1).flatten()[:n].int()        # first value in the high nibble
        if nested:
            amax = t["nested_quant_map"][t["absmax"].long()] * \
                t["nested_absmax"].repeat_interleave(nb)[:blocks] + offset
        else:
            amax = t["absmax"].float()
        w = t["quant_map"][codes]
        del codes
        return w.mul_(amax.repeat_interleave(blocksize)[:n]).reshape(shape)

    return decoded(prefix, (shape[0], shape[1]), parts, dequant, scheme, {"quant_state": state})
