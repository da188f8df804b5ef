"""What a quantized module's stored tensors must look like (shape, dtype, presence) for the declared scheme,
given the module's logical weight shape [out, in]. The layouts are each producer's (field-anchors.md):

  GPTQ       qweight I32 [in*b/32, out]  qzeros I32 [G, out*b/32]  scales [G, out]  g_idx I32 [in]
  AWQ gemm   qweight I32 [in, out*b/32]  qzeros I32 [G, out*b/32]  scales [G, out]
  CT packed  weight_packed I32 [out, ceil(in*b/32)]  weight_scale [out, G]  weight_zero_point I32 [ceil(out*b/32), G]
  NVFP4      weight_packed U8 [out, in/2]  weight_scale F8 [out, in/16]  weight_global_scale F32 [1]
  FP8 block  weight F8 [out, in]  weight_scale_inv F32 [ceil(out/bo), ceil(in/bi)]
  bnb 4-bit  weight U8 [ceil(n/2), 1]  .absmax [ceil(n/blocksize)]  .quant_map F32 [16]  .quant_state JSON
G = ceil(in / group_size), 1 for per-channel (-1) groups.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from reference_engine.files.quant.compressed_tensors import NVFP4_BLOCK
from reference_engine.files.quant.module import QuantModule
from reference_engine.files.quant.scheme import QuantScheme

FLOATS = ("F32", "F16", "BF16")
INT32 = ("I32", "U32")


@dataclass(frozen=True)
class Expect:
    shape: tuple[int, ...] | None     # None: any shape
    dtypes: tuple[str, ...]
    required: bool
    role: str                         # "weight" (the packed values), "scale", "zero", "g_idx", "shape", "state"


def groups(in_features: int, group_size: int | None) -> int:
    if group_size is None or group_size <= 0:
        return 1
    return -(-in_features // group_size)


def gemv(scheme: QuantScheme) -> bool:
    """AutoAWQ's GEMV layouts (qweight [out, in*b/32]); gemm, exllama and ipex all store GEMM's."""
    return scheme.method == "awq" and scheme.fmt.startswith("gemv")


def expected_layout(scheme: QuantScheme, module: QuantModule, out: int, inp: int,
                    state: dict | None = None) -> dict[str, Expect]:
    """suffix -> Expect for a module of logical shape [out, inp]; `state` is a bitsandbytes quant_state. Bits,
    group size, symmetry and format are the module's own (its compressed-tensors config group, its gptqmodel
    dynamic override), so a mixed-precision checkpoint is measured group by group."""
    p = module.prefix
    bits, gs, sym = scheme.bits_for(p) or 4, scheme.group_for(p), scheme.sym_for(p)
    g = groups(inp, gs)
    if module.layout == "packed-int" and gemv(scheme):
        return {"qweight": Expect((out, inp * bits // 32), INT32, True, "weight"),
                "scales": Expect(None, FLOATS, True, "scale"),
                "qzeros": Expect(None, INT32, not sym, "zero")}
    if module.layout == "packed-int" and scheme.method == "awq":
        return {"qweight": Expect((inp, out * bits // 32), INT32, True, "weight"),
                "scales": Expect((g, out), FLOATS, True, "scale"),
                "qzeros": Expect((g, out * bits // 32), INT32, not sym, "zero")}
    if module.layout == "packed-int":        # GPTQ (also what a GPTQ layout under another method looks like)
        return {"qweight": Expect((inp * bits // 32, out), INT32, True, "weight"),
                "scales": Expect((g, out), FLOATS, True, "scale"),
                "qzeros": Expect((g, out * bits // 32), INT32, True, "zero"),
                "g_idx": Expect((inp,), INT32, False, "g_idx")}
    if module.layout == "packed" and (module.tensors["weight_packed"].dtype == "U8"
                                      or scheme.fmt_for(p).startswith("nvfp4")):
        return {"weight_packed": Expect((out, inp // 2), ("U8",), True, "weight"),
                "weight_scale": Expect((out, inp // NVFP4_BLOCK), ("F8_E4M3",), True, "scale"),
                "weight_global_scale": Expect(None, ("F32",), True, "scale"),
                "weight_shape": Expect((2,), ("I64", "I32"), False, "shape")}
    if module.layout == "packed":
        scale = _ct_scale_shape(scheme, p, out, inp, g)
        return {"weight_packed": Expect((out, math.ceil(inp * bits / 32)), INT32, True, "weight"),
                "weight_scale": Expect(scale, FLOATS, True, "scale"),
                "weight_zero_point": Expect((math.ceil(out * bits / 32), scale[-1]) if not sym and scale else None,
                                            INT32 + ("I8",), not sym, "zero"),
                "weight_shape": Expect((2,), ("I64", "I32"), True, "shape"),
                "weight_g_idx": Expect((inp,), INT32, False, "g_idx")}
    if module.layout == "fp8-block":
        bo, bi = scheme.block_for(p) or (128, 128)
        return {"weight": Expect((out, inp), ("F8_E4M3",), True, "weight"),
                "weight_scale_inv": Expect((-(-out // bo), -(-inp // bi)), ("F32", "BF16"), True, "block_scale")}
    if module.layout in ("fp8", "int8"):
        return {"weight": Expect((out, inp), ("F8_E4M3",) if module.layout == "fp8" else ("I8",), True, "weight"),
                "weight_scale": Expect(_ct_scale_shape(scheme, p, out, inp, g), FLOATS, True, "scale")}
    if module.layout == "bnb4":
        return _bnb4(scheme, out * inp, state or {})
    if module.layout == "bnb8":
        return {"weight": Expect((out, inp), ("I8",), True, "weight"), "SCB": Expect((out,), FLOATS, True, "scale")}
    return {}


def _ct_scale_shape(scheme: QuantScheme, prefix: str, out: int, inp: int, g: int) -> tuple[int, ...] | None:
    strategy, block = scheme.strategy_for(prefix), scheme.block_for(prefix)
    if strategy == "tensor":
        return None                 # [1] or [] — both are written
    if strategy == "channel":
        return out, 1
    if strategy == "block" and block:
        return -(-out // block[0]), -(-inp // block[1])
    return out, g


def _bnb4(scheme: QuantScheme, numel: int, state: dict) -> dict[str, Expect]:
    blocksize = state.get("blocksize", 64) if isinstance(state.get("blocksize"), int) else 64
    blocks = -(-numel // max(blocksize, 1))
    nested = "nested_offset" in state or scheme.double_quant
    out = {"weight": Expect((-(-numel // 2), 1), ("U8",), True, "weight"),
           "weight.absmax": Expect((blocks,), ("U8",) if nested else ("F32",), True, "scale"),
           "weight.quant_map": Expect((16,), ("F32",), True, "state"),
           f"weight.quant_state.bitsandbytes__{scheme.fmt}": Expect(None, ("U8",), True, "state")}
    if nested:
        out["weight.nested_absmax"] = Expect(None, ("F32",), True, "scale")
        out["weight.nested_quant_map"] = Expect((256,), ("F32",), True, "state")
    return out


def implied_bits(scheme: QuantScheme, module: QuantModule, out: int, inp: int) -> int | None:
    """The bit width the packed tensor's shape implies (None when it says nothing)."""
    if module.layout == "packed-int" and "qweight" in module.tensors:
        rows, cols = (module.tensors["qweight"].shape + (0, 0))[:2]
        if scheme.method == "awq" and not gemv(scheme):
            return cols * 32 // out if out and cols * 32 % out == 0 else None
        if scheme.method == "awq":
            return cols * 32 // inp if inp and cols * 32 % inp == 0 else None
        return rows * 32 // inp if inp and rows * 32 % inp == 0 else None
    packed = module.tensors.get("weight_packed")
    if module.layout == "packed" and packed is not None and packed.dtype != "U8":
        cols = (packed.shape + (0, 0))[1]
        return cols * 32 // inp if inp and cols * 32 % inp == 0 else None
    return None


def implied_group(module: QuantModule, out: int, inp: int, scheme: QuantScheme) -> int | None:
    """The group size the scales' shape implies (-1 for one group; None when it says nothing)."""
    if module.layout == "packed-int" and "scales" in module.tensors and not gemv(scheme):
        g = (module.tensors["scales"].shape + (0,))[0]
    elif module.layout == "packed" and len(getattr(module.tensors.get("weight_scale"), "shape", ())) == 2:
        g = module.tensors["weight_scale"].shape[1]
    else:
        return None
    if g == 1:
        return -1
    return inp // g if g and inp % g == 0 else None
