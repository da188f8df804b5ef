"""compressed-tensors (llm-compressor's checkpoints; quant_method "compressed-tensors"), per linear module:

  pack-quantized     weight_packed int32 [out, ceil(in * b / 32)] dense LSB-first stream of q + 2^(b-1),
                     weight_shape [out, in], weight_scale [out, groups] | [out, 1] | [1],
                     weight_zero_point (asymmetric) int32 packed along out the same way, optional weight_g_idx
                     W = (q - z[:, g]) * s[:, g]      (g = weight_g_idx, else i // group_size)
  int/naive-quantized  weight int8 [out, in], W = (q - z) * s
  float-quantized    weight fp8 e4m3 [out, in] * weight_scale (tensor [1], channel [out, 1], group, block)
  nvfp4-pack-quantized  weight_packed uint8 [out, in / 2] (low nibble = even element; E2M1: bit 3 the sign,
                     magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}), weight_scale fp8 [out, in / 16],
                     weight_global_scale f32 [1] stored as a divisor: W = fp4 * weight_scale / weight_global_scale

The arguments of a module come from the config group whose targets match it ("Linear", "re:<regex>" or a
module name; scheme.py's `matches`, the QNT checks' too); `ignore` entries keep a module float.
Activation, KV-cache and input scales are not weights: they stay in `.raw` for the checks.
Sources: compressed_tensors/compressors/{pack_quantized,nvfp4,naive_quantized}/,
quantization/lifecycle/forward_helpers.py (_dequantize), vLLM compressed_tensors scheme files
(weight_g_idx for actorder "group").
"""
from __future__ import annotations

import torch

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.quant.formats import (
    FLOATS,
    check_groups,
    disagree,
    part,
    stored_prefixes,
)
from reference_engine.files.quant.module import QuantModule, decoded
from reference_engine.files.quant.packing import unpack_int32, words_for

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
NVFP4_BLOCK = 16   # values sharing one fp8 scale
HIDDEN_SUFFIXES = (".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale", ".k_scale",
                   ".v_scale", ".q_scale", ".k_zero_point", ".v_zero_point", ".weight_shape")


def modules(raw, scheme, where):
    """(modules, hidden): each stored quantized module dequantized with the arguments of the config group
    that targets it (declaration.py keeps every group's weights, bits and format)."""
    packed = stored_prefixes(raw, ".weight_packed")
    scaled = [p for p in stored_prefixes(raw, ".weight_scale") if p not in packed and f"{p}.weight" in raw]
    out = []
    for prefix in packed + scaled:
        if prefix in scaled and raw.info(f"{prefix}.weight").dtype in FLOATS:
            continue     # quantization_status "frozen": the float weight is stored, its scales ride along
        group = _group(prefix, scheme, where)
        out.append(_module(raw, prefix, group, f"compressed-tensors {group.fmt} {group.name}", where))
    consumed = {p for m in out for p in m.parts.values()}
    hidden = {n for n in raw.names if n.endswith(HIDDEN_SUFFIXES) or
              (n.endswith((".weight_scale", ".weight_zero_point", ".weight_global_scale", ".weight_g_idx"))
               and n not in consumed)}
    return out, hidden


def _group(prefix: str, scheme, where):
    if scheme.excluded(prefix):
        raise ModelDirError(where, f"{prefix} is stored quantized but quantization_config.ignore lists it")
    group = scheme.group_of(prefix)
    if group is None:
        raise ModelDirError(where, f"{prefix} is stored quantized but no quantization_config.config_groups "
                                   f"entry targets it")
    return group


def _module(raw, prefix: str, args, scheme: str, where) -> QuantModule:
    bits, kind = args.bits, args.kind
    if bits is None:
        raise ModelDirError(where, f"{prefix} ({scheme}): config group {args.name} declares no weights.num_bits")
    if f"{prefix}.weight_packed" in raw:
        if kind == "float" and bits == 4:
            return _nvfp4(raw, prefix, scheme)
        if kind != "int":
            raise UnsupportedError(where, f"{prefix} ({scheme}): packed {kind} {bits}-bit weights are not supported")
        return _packed(raw, prefix, args, bits, scheme)
    weight = part(raw, prefix, "weight", ("I8", "F8_E4M3"), 2, scheme)
    if (weight.dtype == "I8") != (kind == "int"):
        raise disagree(weight, scheme, f"dtype {weight.dtype} disagrees with weights.type {kind!r}")
    out_f, in_f = weight.shape
    scale = part(raw, prefix, "weight_scale", FLOATS, (0, 1, 2), scheme)
    expand = _scale_expander(scale, args, out_f, in_f, scheme)
    parts = {"weight": weight.name, "weight_scale": scale.name}
    asym = not args.sym
    if asym:
        parts["weight_zero_point"] = part(raw, prefix, "weight_zero_point", ("I8", "I32") + FLOATS, (0, 1, 2),
                                          scheme).name

    def dequant(t):
        w = t["weight"].float()
        if asym:
            w = w - expand(t["weight_zero_point"].float(), None)
        return w * expand(t["weight_scale"].float(), None)

    return decoded(prefix, (out_f, in_f), parts, dequant, scheme)


def _scale_expander(scale, args, out_f: int, in_f: int, scheme: str):
    """A function (per-module tensor of scale's shape, g_idx) -> broadcastable to [out, in]."""
    strategy = args.strategy or ("group" if args.group_size else "tensor")
    shape = tuple(scale.shape)
    if strategy == "tensor" or shape in ((), (1,)):
        if shape not in ((), (1,), (1, 1)):
            raise disagree(scale, scheme, f"shape {list(shape)}, expected [1] for a per-tensor scale")
        return lambda s, g: s.reshape(1, 1)
    if strategy == "channel":
        if shape not in ((out_f, 1), (out_f,)):
            raise disagree(scale, scheme, f"shape {list(shape)}, expected [{out_f}, 1] for per-channel scales")
        return lambda s, g: s.reshape(out_f, 1)
    if strategy in ("group", "tensor_group"):
        gs = args.group_size
        if gs is None or gs < 1:
            raise disagree(scale, scheme, f"group strategy with group_size {gs!r}")
        if shape != (out_f, -(-in_f // gs)):
            raise disagree(scale, scheme, f"shape {list(shape)}, expected {[out_f, -(-in_f // gs)]} "
                                          f"({in_f} inputs in groups of {gs})")
        return lambda s, g: s[:, g] if g is not None else s.repeat_interleave(gs, 1)[:, :in_f]
    if strategy == "block":
        block = args.block
        if block is None:
            raise disagree(scale, scheme, f"block strategy with block_structure {block!r}")
        bo, bi = block
        if shape != (-(-out_f // bo), -(-in_f // bi)):
            raise disagree(scale, scheme, f"shape {list(shape)}, expected {[-(-out_f // bo), -(-in_f // bi)]}")
        return lambda s, g: s.repeat_interleave(bo, 0)[:out_f].repeat_interleave(bi, 1)[:, :in_f]
    raise UnsupportedError(scale.file, f"{scale.name} ({scheme}): weight strategy {strategy!r} is not supported")


def _packed(raw, prefix: str, args, bits: int, scheme: str) -> QuantModule:
    packed = part(raw, prefix, "weight_packed", ("I32",), 2, scheme)
    shape_info = part(raw, prefix, "weight_shape", ("I64", "I32"), 1, scheme)
    shape = raw.get(shape_info.name).tolist()
    if len(shape) != 2 or not all(0 < d < 1 << 31 for d in shape):
        raise disagree(shape_info, scheme, f"weight_shape {shape} is not [out, in]")
    out_f, in_f = shape
    if tuple(packed.shape) != (out_f, words_for(in_f, bits)):
        raise disagree(packed, scheme, f"shape {list(packed.shape)}, expected {[out_f, words_for(in_f, bits)]} "
                                       f"for {bits}-bit values of a {shape} weight")
    scale = part(raw, prefix, "weight_scale", FLOATS, (0, 1, 2), scheme)
    expand = _scale_expander(scale, args, out_f, in_f, scheme)
    parts = {"weight_packed": packed.name, "weight_scale": scale.name}
    if f"{prefix}.weight_g_idx" in raw:
        g_idx = part(raw, prefix, "weight_g_idx", ("I32", "I64"), 1, scheme)
        if tuple(g_idx.shape) != (in_f,):
            raise disagree(g_idx, scheme, f"shape {list(g_idx.shape)}, expected [{in_f}]")
        check_groups(raw, g_idx, scale.shape[1] if len(scale.shape) == 2 else 1, scheme)
        parts["weight_g_idx"] = g_idx.name
    asym = not args.sym
    if asym:
        zp = part(raw, prefix, "weight_zero_point", ("I32", "I8"), (1, 2), scheme)
        groups = scale.shape[1] if len(scale.shape) == 2 else 1
        if zp.dtype == "I32" and tuple(zp.shape) != (words_for(out_f, bits), groups):
            raise disagree(zp, scheme, f"shape {list(zp.shape)}, expected {[words_for(out_f, bits), groups]} "
                                       f"(zero points packed along out)")
        parts["weight_zero_point"] = zp.name
    offset = 1 << (bits - 1)

    def dequant(t):
        g = t["weight_g_idx"].long() if "weight_g_idx" in t else None
        w = unpack_int32(t["weight_packed"], bits, in_f, 1).float().sub_(offset)   # [out, in] signed
        if asym:
            z = t["weight_zero_point"]
            z = unpack_int32(z, bits, out_f, 0) - offset if z.dtype == torch.int32 else z
            w.sub_(expand(z.float().reshape(t["weight_scale"].shape), g))
        return w.mul_(expand(t["weight_scale"].float(), g))

    return decoded(prefix, (out_f, in_f), parts, dequant, scheme,
                       {"bits": bits, "symmetric": not asym, "strategy": args.strategy})


def _nvfp4(raw, prefix: str, scheme: str) -> QuantModule:
    packed = part(raw, prefix, "weight_packed", ("U8",), 2, scheme)
    scale = part(raw, prefix, "weight_scale", ("F8_E4M3",) + FLOATS, 2, scheme)
    global_scale = part(raw, prefix, "weight_global_scale", FLOATS, (0, 1), scheme)
    out_f, in_f = packed.shape[0], packed.shape[1] * 2
    if tuple(scale.shape) != (out_f, -(-in_f // NVFP4_BLOCK)):
        raise disagree(scale, scheme, f"shape {list(scale.shape)}, expected {[out_f, -(-in_f // NVFP4_BLOCK)]} "
                                      f"(one scale per {NVFP4_BLOCK} values)")
    table = torch.tensor(E2M1 + tuple(-v for v in E2M1))

    def dequant(t):
        b = t["weight_packed"]
        codes = torch.stack((b & 0xF, b >> 4), -1).flatten(1)                  # [out, in], even = low nibble
        s = t["weight_scale"].float() / t["weight_global_scale"].float()       # [out, in / 16]
        return table[codes.int()].mul_(s.repeat_interleave(NVFP4_BLOCK, 1)[:, :in_f])

    parts = {"weight_packed": packed.name, "weight_scale": scale.name, "weight_global_scale": global_scale.name}
    return decoded(prefix, (out_f, in_f), parts, dequant, scheme)
