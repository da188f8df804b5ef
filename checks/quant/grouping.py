"""The stored tensors of a quantized checkpoint grouped by module (tensor-name prefix): which modules are stored
quantized and in which layout, which linear layers are stored in float, and what each quantized module's
tensors should look like for the declared scheme. Only names, dtypes and shapes: nothing here reads a tensor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from reference_engine.files.quant.scheme import QuantScheme

# a suffix only quantized modules store -> the layout it marks
MARKERS = {"qweight": "packed-int", "weight_packed": "packed", "weight_scale_inv": "fp8-block",
           "weight.absmax": "bnb4", "weight.quant_map": "bnb4", "SCB": "bnb8"}
# every suffix a quantized module may store besides its bias
MEMBERS = ("qweight", "qzeros", "scales", "g_idx", "weight_packed", "weight_scale", "weight_zero_point",
           "weight_shape", "weight_g_idx", "weight_global_scale", "input_global_scale", "input_scale",
           "weight_scale_inv", "weight", "weight.absmax", "weight.quant_map", "weight.nested_absmax",
           "weight.nested_quant_map", "weight.quant_state.bitsandbytes__nf4", "weight.quant_state.bitsandbytes__fp4",
           "SCB", "weight_format", "output_scale")
QUANT_DTYPES = ("F8_E4M3", "F8_E5M2", "I8", "U8")   # a `.weight` stored in these is not a float weight
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
KV_SCALES = ("k_scale", "v_scale")
NEVER_LINEAR = ("embed_tokens", "wte", "tok_embeddings")


@dataclass
class QuantModule:
    prefix: str                       # "model.layers.0.self_attn.q_proj"
    layout: str                       # packed-int (gptq/awq), packed (compressed-tensors), fp8-block, fp8, bnb4, ...
    tensors: dict[str, object] = field(default_factory=dict)   # suffix -> TensorInfo

    def has(self, suffix: str) -> bool:
        return suffix in self.tensors

    def name(self, suffix: str) -> str:
        return f"{self.prefix}.{suffix}"


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


def lm_head_expected_quantized(scheme: QuantScheme, prefix: str = "lm_head") -> bool:
    """Whether the scheme quantizes the output projection: only GPTQ's lm_head=true and a compressed-tensors
    group targeting it without an ignore entry do; AWQ, fp8 and bitsandbytes keep it in float."""
    if scheme.method == "gptq":
        return scheme.lm_head and not scheme.excluded(prefix)
    if scheme.method == "compressed-tensors":
        return scheme.targeted(prefix) and not scheme.excluded(prefix)
    return False


def expected_quantized(scheme: QuantScheme, prefix: str) -> bool:
    """Whether the config says this linear layer is stored quantized."""
    if prefix.split(".")[-1] == "lm_head":
        return lm_head_expected_quantized(scheme, prefix)
    return scheme.targeted(prefix) and not scheme.excluded(prefix)
