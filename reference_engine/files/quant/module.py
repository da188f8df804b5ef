"""The one QuantModule: a quantized linear module as the engine and the QNT checks both see it.

`inventory(raw)` groups a checkpoint's stored names by module prefix (names, dtypes and shapes only: nothing
is read), giving each module stored quantized its layout and its stored tensors by suffix; the QNT checks
measure those, even on a checkpoint the engine refuses. A format module (gptq, awq, compressed_tensors,
fp8, bnb) decodes a module: the stored parts its formula reads (`parts`), the logical [out, in] `shape`, and
`dequant`; table.py joins both halves, so the engine's table holds complete modules.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

# a suffix only quantized modules store -> the layout it marks
MARKERS = {"blocks": "mxfp4", "qweight": "packed-int", "weight_packed": "packed", "weight_scale_inv": "fp8-block",
           "weight.absmax": "bnb4", "weight.quant_map": "bnb4", "SCB": "bnb8"}
# every suffix a quantized module may store besides its bias
MEMBERS = ("qweight", "qzeros", "scales", "g_idx", "weight_packed", "weight_scale", "weight_zero_point",
           "weight_shape", "weight_g_idx", "weight_global_scale", "input_global_scale", "input_scale",
           "weight_scale_inv", "weight", "weight.absmax", "weight.quant_map", "weight.nested_absmax",
           "weight.nested_quant_map", "weight.quant_state.bitsandbytes__nf4", "weight.quant_state.bitsandbytes__fp4",
           "SCB", "weight_format", "output_scale")
UNDERSCORE_MEMBERS = ("blocks", "scales")   # mxfp4: "...experts.gate_up_proj_blocks" (joined by "_", not ".")
QUANT_DTYPES = ("F8_E4M3", "F8_E5M2", "I8", "U8")   # a `.weight` stored in these is not a float weight
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
KV_SCALES = ("k_scale", "v_scale")
NEVER_LINEAR = ("embed_tokens", "wte", "tok_embeddings")


@dataclass
class QuantModule:
    prefix: str                                 # "model.layers.0.self_attn.q_proj"
    layout: str = ""                            # packed-int (gptq/awq), packed (compressed-tensors), fp8-block,
                                                # fp8, int8, bnb4, bnb8, scaled
    tensors: dict[str, object] = field(default_factory=dict)   # suffix -> stored TensorInfo
    # decoded by a format module (None / empty until then, and for a module the engine does not read):
    shape: tuple[int, int] | None = None        # [out, in] of the dequantized weight
    parts: dict[str, str] = field(default_factory=dict)       # role -> stored name ("qweight" -> "...qweight")
    dequant: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None   # parts' tensors -> f32 [out, in]
    scheme: str = ""                            # what error messages and reports call it ("gptq 4-bit g128")
    extra: dict = field(default_factory=dict)
    logical: str = ""                           # the logical tensor's name when it is not prefix.weight (mxfp4:
                                                # the experts' "...experts.gate_up_proj", [experts, in, out])

    @property
    def name(self) -> str:
        """The logical tensor the module makes ("...q_proj.weight")."""
        return self.logical or f"{self.prefix}.weight"

    def member(self, suffix: str) -> str:
        """A stored tensor's name ("qzeros" -> "...q_proj.qzeros")."""
        return f"{self.prefix}.{suffix}"

    def has(self, suffix: str) -> bool:
        return suffix in self.tensors


def decoded(prefix: str, shape: tuple[int, ...], parts: dict[str, str], dequant, scheme: str,
            extra: dict | None = None, logical: str = "") -> QuantModule:
    """What a format module returns: the decoding half of a QuantModule (table.py adds the stored half)."""
    return QuantModule(prefix, shape=shape, parts=parts, dequant=dequant, scheme=scheme, extra=extra or {},
                       logical=logical)


@dataclass
class Inventory:
    quantized: dict[str, QuantModule]     # prefix -> module stored quantized
    float_linear: list[str]               # prefixes of 2-D float `.weight` tensors that are linear layers
    kv_scales: dict[str, list[str]]       # attention prefix -> the k_scale/v_scale suffixes it stores


def split(name: str) -> tuple[str, str] | None:
    """(prefix, member suffix) when `name` is a quantization member, longest suffix first."""
    for suffix in sorted(MEMBERS, key=len, reverse=True):
        if name.endswith("." + suffix):
            return name[:-len(suffix) - 1], suffix
    for suffix in UNDERSCORE_MEMBERS:
        if name.endswith("_" + suffix) and "." in name:
            return name[:-len(suffix) - 1], suffix
    return None


def quant_side(name: str) -> bool:
    """A tensor that only exists because of quantization (a scale, zero point, g_idx, packed state)."""
    if name.rsplit(".", 1)[-1] in KV_SCALES:
        return True
    parts = split(name)
    return parts is not None and parts[1] != "weight"


def inventory(raw) -> Inventory:
    """Group the stored names of `raw` (a tensor table: names, info) by module."""
    by_prefix: dict[str, dict[str, object]] = {}
    kv: dict[str, list[str]] = {}
    for name in raw.names:
        tail = name.rsplit(".", 1)[-1]
        if tail in KV_SCALES:
            kv.setdefault(name.rsplit(".", 1)[0], []).append(tail)
            continue
        parts = split(name)
        if parts is not None:
            by_prefix.setdefault(parts[0], {})[parts[1]] = raw.info(name)
    quantized, float_linear = {}, []
    for prefix, members in by_prefix.items():
        layout = layout_of(members)
        if layout is not None:
            quantized[prefix] = QuantModule(prefix, layout, members)
        elif _is_float_linear(prefix, members.get("weight")):
            float_linear.append(prefix)
    return Inventory(quantized, float_linear, kv)


def layout_of(members: dict[str, object]) -> str | None:
    for suffix, layout in MARKERS.items():
        if suffix in members:
            return layout
    weight = members.get("weight")
    if weight is not None and weight.dtype in QUANT_DTYPES:
        return "fp8" if weight.dtype.startswith("F8") else "int8"
    if weight is not None and any(s in members for s in ("weight_scale", "weight_zero_point")):
        return "scaled"           # a float weight with quantization scales: a fake-quantized or half-done module
    return None


def _is_float_linear(prefix: str, info) -> bool:
    if info is None or info.dtype not in FLOAT_DTYPES or len(info.shape) != 2:
        return False
    return not any(part in prefix.split(".") for part in NEVER_LINEAR)
