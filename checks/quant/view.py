"""One quantized checkpoint as the QNT checks see it, built once per run: the declared scheme, the stored
tensors grouped by module, each module's logical [out, in] and its layout mismatches."""
from __future__ import annotations

from dataclasses import dataclass, field

from checks.quant.layout import Expect, expected_layout
from checks.quant.values import read, read_state
from checks.catalogue.inputs import ResourceError
from checks.catalogue.registry import Skip
from reference_engine.files.quant.declaration import read_declaration
from reference_engine.files.quant.module import Inventory, QuantModule, inventory
from reference_engine.files.quant.scheme import ConfigProblem, QuantScheme

STATE_KEY = "quant_view"


@dataclass(frozen=True)
class Mismatch:
    module: str
    suffix: str
    role: str
    found: str                  # "missing", "shape [8, 64]", "dtype F16"
    expected: str


@dataclass
class QuantView:
    qc: dict | None                        # quantization_config as written (None: not declared)
    scheme: QuantScheme | None             # the engine's reading of qc (files/quant/declaration.py)
    config_problems: list[ConfigProblem]
    raw: object                            # the stored tensors (reference_engine.files.weights.Weights)
    inv: Inventory
    logical: dict[str, tuple[int, int]] = field(default_factory=dict)   # prefix -> (out, in)
    layouts: dict[str, dict[str, Expect]] = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)


def raw_weights(ctx):
    """The stored tensors, as written: a quantized table's `.raw`, else the safetensors themselves."""
    def build():
        from reference_engine.files.weights import Weights
        return Weights.open(ctx.model_dir)
    try:
        table = ctx.base_weights      # with an adapter, the quantized base under it (QLoRA)
        raw = getattr(table, "raw", None)
        if raw is not None:
            return raw
    except ResourceError:
        pass
    return ctx._get("quant_raw", build)


def quant_view(ctx) -> QuantView:
    """The view (Skip for GGUF; ResourceError when the safetensors cannot be opened: the WGT/FIL checks say why)."""
    if ctx.is_gguf:
        raise Skip("a GGUF file (its quantization is checked by the GGF checks)")
    if STATE_KEY not in ctx.state:
        ctx.state[STATE_KEY] = _build(ctx)
    return ctx.state[STATE_KEY]


def quantized_view(ctx) -> QuantView:
    """The view of a model that declares a usable quantization_config; Skip otherwise."""
    view = quant_view(ctx)
    if view.qc is None:
        raise Skip("not a quantized model (config.json has no quantization_config)")
    if view.scheme is None:
        raise Skip("quantization_config is unusable (QNT001)")
    return view


def _build(ctx) -> QuantView:
    qc = ctx.quantization_config
    scheme, problems = read_declaration(qc) if qc is not None else (None, [])   # the engine's own reader
    raw = raw_weights(ctx)
    view = QuantView(qc, scheme, problems, raw, inventory(raw))
    if scheme is None:
        return view
    table = _config_shapes(ctx)
    for prefix, module in view.inv.quantized.items():
        shape = table.get(f"{prefix}.weight") or _stored_shape(view, module)
        if shape is None or len(shape) != 2:
            continue
        view.logical[prefix] = (shape[0], shape[1])
        state = _bnb_state(view, module)
        layout = expected_layout(scheme, module, shape[0], shape[1], state)
        view.layouts[prefix] = layout
        view.mismatches += compare_layout(module, layout)
    return view


def _config_shapes(ctx) -> dict:
    from checks.shared.weights.tensor_layout import expected_shapes
    try:
        return expected_shapes(ctx.config)
    except (Skip, ResourceError, ValueError, KeyError, TypeError):
        return {}


def _bnb_state(view: QuantView, module: QuantModule) -> dict | None:
    if module.layout != "bnb4":
        return None
    for suffix in module.tensors:
        if suffix.startswith("weight.quant_state."):
            return read_state(view.raw, module.member(suffix)) or {}
    return {}


def _stored_shape(view: QuantView, module: QuantModule) -> tuple[int, ...] | None:
    """[out, in] from the stored tensors when config.json does not describe the module."""
    t = module.tensors
    bits = view.scheme.bits_for(module.prefix) or 4
    if "weight_shape" in t:
        shape = read(view.raw, module.member("weight_shape"))
        if shape is not None and shape.numel() == 2:
            return tuple(int(v) for v in shape.tolist())
    if module.layout in ("fp8", "fp8-block", "int8", "bnb8") and len(t["weight"].shape) == 2:
        return tuple(t["weight"].shape)
    if module.layout == "bnb4":
        state = _bnb_state(view, module) or {}
        shape = state.get("shape")
        return tuple(shape) if isinstance(shape, list) and all(isinstance(v, int) for v in shape) else None
    q = t.get("qweight")
    if q is not None and len(q.shape) == 2:
        if view.scheme.method == "awq":
            return q.shape[1] * 32 // bits, q.shape[0]
        return q.shape[1], q.shape[0] * 32 // bits
    return None


def compare_layout(module: QuantModule, layout: dict[str, Expect]) -> list[Mismatch]:
    out = []
    for suffix, want in layout.items():
        info = module.tensors.get(suffix)
        if info is None:
            if want.required:
                out.append(Mismatch(module.prefix, suffix, want.role, "missing", "present"))
            continue
        if info.dtype not in want.dtypes:
            out.append(Mismatch(module.prefix, suffix, want.role, f"dtype {info.dtype}", "/".join(want.dtypes)))
        shape = tuple(info.shape)
        if want.shape is not None and shape != want.shape:
            out.append(Mismatch(module.prefix, suffix, want.role, f"shape {list(shape)}", str(list(want.shape))))
    return out
