"""Quantized safetensors checks (QNT): GPTQ, AWQ, compressed-tensors (W4A16, FP8, NVFP4), block FP8 and
bitsandbytes checkpoints, checked from the files. Each finding names the module (tensor prefix) or the
quantization_config key. The stored tensors are read one module's side tensors at a time (scales, zeros,
g_idx); packed weights are only measured by their headers, never dequantized here.

Their incidents are silent: the model loads and answers "!!!!" (GPTQ v2 zeros read as v1), answers nothing
(an NVFP4 global scale stored inverted) or slightly worse (KV-cache scales missing, read as 1.0).
"""
from __future__ import annotations

from checks.quant.layout import groups, implied_bits, implied_group
from checks.quant.values import g_idx_problems, read, scale_stats, stored_zero_values
from checks.quant.view import quant_view, quantized_view
from checks.catalogue.locations import config_key, tensor
from checks.catalogue.registry import Problem, Skip, check
from findings import Location
from reference_engine.files.quant.scheme import ENGINE

SHOWN = 8                     # modules listed in a message before "and N more"
SCALE_SUFFIXES = ("scales", "weight_scale", "weight_scale_inv", "weight_global_scale", "SCB", "weight.absmax",
                  "weight.nested_absmax")
NVFP4_MAX_ABS = 100.0         # a linear weight beyond this dequantized magnitude is a wrong scale, not a weight


def at_key(key: str) -> Location:
    """A key of config.json's quantization_config."""
    return config_key(f"quantization_config.{key}" if key else "quantization_config")


def at_tensor(raw, name: str) -> Location:
    """A tensor, in the shard that holds it."""
    info = raw.info(name) if name in raw else None
    return tensor(name, info.file.name if info is not None else None)


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


@check("QNT001", category="quantization", severity="error", needs=("config",),
       hint="Fix quantization_config in config.json to what the quantizer wrote (quant_method, bits, group_size, "
            "checkpoint_format), or re-export the model with the quantizer.")
def quantization_config_valid(ctx):
    """quantization_config names a known method and values a loader can use.

    vLLM and transformers pick the kernel and the dequantization formula from quant_method, bits, group_size,
    checkpoint_format (GPTQ), version (AWQ), the config groups and format (compressed-tensors),
    weight_block_size (FP8) and the bitsandbytes quant type. An unknown method, a bit width the format has no
    kernel for, or a group size that is neither -1 nor a positive size makes the model unloadable or loads it
    with the wrong formula. The finding names the key. The declaration is read by the engine's own reader
    (reference_engine/files/quant/declaration.py), so what is an error here is what the engine refuses; a
    real producer's layout the engine does not dequantize (AWQ GEMV, gptqmodel `dynamic`, bitsandbytes
    8-bit) is a note, and the engine-backed checks skip with the engine's one-line reason.
    """
    view = quant_view(ctx)
    if view.qc is None:
        raise Skip("not a quantized model (config.json has no quantization_config)")
    for p in view.config_problems:
        if p.kind == ENGINE:     # a real producer's declaration the engine cannot run: a note, not a fault
            yield Problem(f"{p.message}: the engine-backed checks are skipped, the file checks still run",
                          severity="info", evidence={"key": p.key, "quantization_config": view.qc},
                          location=at_key(p.key))
        else:
            yield Problem(p.message, evidence={"key": p.key, "quantization_config": view.qc}, location=at_key(p.key))


@check("QNT002", category="quantization", severity="error", needs=("config",),
       hint="Re-export with the quantizer, or correct bits/group_size in quantization_config to what the tensors "
            "hold (the evidence lists what the shapes imply).")
def quantized_layout_matches_config(ctx):
    """Every quantized module's tensors have the shape and dtype the declared bits and group size give.

    The packed weight (GPTQ/AWQ qweight, compressed-tensors weight_packed, NVFP4 uint8 nibbles, FP8 weight,
    bitsandbytes uint8) holds in*out*bits/32 int32 words, the scales one row per group: a config saying
    bits=8 over 4-bit tensors, group_size 32 over tensors grouped by 128, int16 packing where int32 is
    expected, or a packed tensor cut short makes loaders refuse the shapes or dequantize garbage. When every
    module disagrees the same way the finding names the config key and the value the tensors imply.
    """
    view = quantized_view(ctx)
    bad = [m for m in view.mismatches if m.found != "missing" and m.role != "block_scale"]
    if not bad:
        return
    yield from _config_level(view, bad) or _per_module(view, bad)


def _config_level(view, bad) -> list[Problem]:
    """One finding at bits/group_size when all modules' mismatches point to the same other value."""
    scheme = view.scheme
    out = []
    for key, implied, declared in (("bits", implied_bits, scheme.bits), ("group_size", implied_group,
                                                                          scheme.group_size)):
        values = {implied(scheme, view.inv.quantized[p], *view.logical[p]) if key == "bits" else
                  implied(view.inv.quantized[p], *view.logical[p], scheme) for p in view.logical}
        if declared is not None and len(values) == 1 and None not in values and values != {declared}:
            value = values.pop()
            out.append(Problem(f"quantization_config.{key} = {declared} but the tensors of all {len(view.logical)} "
                               f"quantized modules are laid out for {key} = {value}",
                               evidence={"key": key, "declared": declared, "implied": value,
                                         "example": _example(bad[0])}, location=at_key(key)))
    return out


def _example(m) -> dict:
    return {"tensor": f"{m.module}.{m.suffix}", "found": m.found, "expected": m.expected}


def _per_module(view, bad):
    by_kind: dict[tuple[str, str], list] = {}
    for m in bad:
        by_kind.setdefault((m.suffix, m.found.split(" ")[0]), []).append(m)
    for (suffix, what), items in by_kind.items():
        first = items[0]
        modules = [m.module for m in items]
        yield Problem(f"{first.module}.{suffix}: {first.found}, expected {first.expected} for the declared scheme"
                      + (f" (also {_listed(modules[1:])})" if len(items) > 1 else ""),
                      evidence={"tensor": f"{first.module}.{suffix}", "found": first.found, "expected": first.expected,
                                "modules": modules[:50], "count": len(items)},
                      location=at_tensor(view.raw, f"{first.module}.{suffix}"))


@check("QNT003", category="quantization", severity="error", needs=("config",),
       hint="Re-export the module with its scales and zero points (the quantizer's save step), or restore the "
            "missing tensors from the original upload.")
def quantized_module_complete(ctx):
    """Every module stored quantized has its scale, zero-point and state tensors.

    A packed weight without its scales (or zero points for an asymmetric scheme, the bitsandbytes quant_map
    and quant_state, the NVFP4 global scale, the FP8 weight_scale_inv) cannot be dequantized: loaders fail
    with a missing key, or a partial loader leaves the scale at its initial value (zeros or ones). A shard
    lost from an upload usually shows up here first.
    """
    view = quantized_view(ctx)
    missing: dict[str, list[str]] = {}
    for m in view.mismatches:
        if m.found == "missing":
            missing.setdefault(m.suffix, []).append(m.module)
    for suffix, modules in missing.items():
        yield Problem(f"{modules[0]} is stored quantized but has no {suffix}"
                      + (f" (nor {_listed(modules[1:])})" if len(modules) > 1 else ""),
                      evidence={"missing": suffix, "modules": modules[:50], "count": len(modules)},
                      location=Location(file=None, logical=f"{modules[0]}.{suffix}"))


@check("QNT004", category="quantization", severity="error", needs=("config",),
       hint="Set checkpoint_format to what the zeros say ('gptq_v2' for zeros 2^(b-1), 'gptq' for 2^(b-1)-1), "
            "or convert the checkpoint with gptqmodel.")
def gptq_zero_point_convention(ctx):
    """A symmetric GPTQ checkpoint stores the zero point its checkpoint_format promises.

    GPTQ v1 (checkpoint_format "gptq", AutoGPTQ) stores every zero minus one, so a symmetric model stores the
    constant 2^(b-1)-1 (7 for 4 bits); gptq_v2 (gptqmodel) stores 2^(b-1) (8). A v2 checkpoint declared v1
    is dequantized one quantization step off in every weight and answers "!!!!" (vLLM PRs #26092, #26343;
    Qwen3.5-27B-GPTQ, PR #38966 detects it from the weights the same way). The zeros are read module by
    module (a few KiB each). Zeros that vary although sym is true mean the config's symmetry is wrong; an
    asymmetric v1 checkpoint holding the top code stored a zero of 0 as -1 (the v1 overflow gptqmodel warns
    about): a warning naming the modules.
    """
    view = quantized_view(ctx)
    scheme = view.scheme
    if scheme.method != "gptq":
        raise Skip(f"not a GPTQ model ({scheme.method})")
    v1, v2 = {}, {}
    varying, wrapped = [], []
    for prefix, module in view.inv.quantized.items():
        bits = scheme.bits_for(prefix)
        if module.layout != "packed-int" or "qzeros" not in module.tensors or not bits or 32 % bits:
            continue
        values = stored_zero_values(view.raw, module.member("qzeros"), bits)
        if values is None or not values.numel():
            continue
        if scheme.version == 1 and int(values.max()) == (1 << bits) - 1:
            wrapped.append(prefix)      # v1 stores z - 1: the top code is z = 0 wrapped around (-1)
        if values.numel() > 1:
            varying.append(prefix)
            continue
        value = int(values[0])
        if value == (1 << (bits - 1)) - 1:
            v1[prefix] = value
        elif value == 1 << (bits - 1):
            v2[prefix] = value
    declared = scheme.version
    wrong = v2 if declared == 1 else v1
    if scheme.sym and wrong and len(wrong) >= len(v1 if declared == 1 else v2):
        other = "gptq_v2" if declared == 1 else "gptq"
        value = next(iter(wrong.values()))
        yield Problem(f"checkpoint_format {scheme.fmt!r} (v{declared}) but the zeros of {len(wrong)} symmetric "
                      f"modules hold {value}, the {other} convention: every weight dequantizes one step off",
                      evidence={"checkpoint_format": scheme.fmt, "stored_zero": value, "bits": scheme.bits,
                                "modules": list(wrong)[:20], "v1_modules": len(v1), "v2_modules": len(v2)},
                      location=at_key("checkpoint_format"))
    if wrapped and not scheme.sym:
        yield Problem(f"{len(wrapped)} modules store the zero code {(1 << scheme.bits) - 1} under GPTQ v1 "
                      f"({_listed(wrapped)}): a zero point of 0 stored as -1 wrapped around, and loaders add 1 "
                      f"(those groups dequantize 2^bits steps off)", severity="warning",
                      evidence={"modules": wrapped[:50], "checkpoint_format": scheme.fmt},
                      location=at_key("checkpoint_format"))
    if scheme.sym and varying:
        yield Problem(f"sym is true but {len(varying)} modules store varying zero points ({_listed(varying)}): "
                      f"the checkpoint is asymmetric", severity="warning",
                      evidence={"modules": varying[:50]}, location=at_key("sym"))


@check("QNT005", category="quantization", severity="error", needs=("config",),
       hint="Re-export with the quantizer; with act-order (desc_act / actorder) keep g_idx and declare it, "
            "otherwise drop g_idx or set desc_act to true.")
def group_index_valid(ctx):
    """g_idx maps every input channel to an existing group, consistently with desc_act.

    With act-order (GPTQ desc_act, compressed-tensors actorder) g_idx lists the group of each input channel;
    an index past the last group reads scales that do not exist, and a permuting g_idx under desc_act false
    is ignored by kernels that assume channel i is in group i // group_size (vLLM's exllama path), which then
    dequantizes with the wrong scales. desc_act true without any g_idx leaves the order unknown.
    """
    view = quantized_view(ctx)
    scheme = view.scheme
    found = False
    for prefix, module in view.inv.quantized.items():
        suffix = "g_idx" if "g_idx" in module.tensors else "weight_g_idx" if "weight_g_idx" in module.tensors else None
        if prefix not in view.logical:
            continue
        out, inp = view.logical[prefix]
        desc_act = scheme.desc_act_for(prefix)
        if suffix is None:
            if desc_act and module.layout in ("packed-int", "packed") and scheme.method != "awq":
                found = True
                yield Problem(f"{prefix}: desc_act/actorder is declared but the module stores no g_idx",
                              evidence={"module": prefix}, location=at_key("desc_act"))
            continue
        g = read(view.raw, module.member(suffix))
        if g is None or g.is_floating_point():
            continue
        gs = scheme.group_for(prefix)
        for problem in g_idx_problems(g, inp, groups(inp, gs), gs, desc_act):
            found = True
            yield Problem(f"{prefix}.{suffix} {problem}", evidence={"module": prefix, "group_size": gs,
                                                                    "desc_act": desc_act, "in_features": inp},
                          location=at_tensor(view.raw, module.member(suffix)))
    if not found and not any(s in m.tensors for m in view.inv.quantized.values() for s in ("g_idx", "weight_g_idx")) \
            and not scheme.desc_act:
        raise Skip("no module stores a g_idx and act-order is not declared")


@check("QNT006", category="quantization", severity="error", needs=("config",),
       hint="Re-quantize the named modules; a zero or negative scale comes from a quantizer bug or a corrupted "
            "shard, a non-finite one from weights that already held inf/NaN.")
def quantization_scales_valid(ctx):
    """Scales are finite and positive in every quantized module.

    Every format multiplies the stored integers by a scale: a NaN or inf scale poisons each output that
    touches its group, a negative one flips the group's weights, and a zero one deletes them (a warning: a
    group whose weights were all zero may legitimately store 0). Each module's scale tensors are read once.
    """
    view = quantized_view(ctx)
    bad, zeros = [], []
    for prefix, module in view.inv.quantized.items():
        for suffix in SCALE_SUFFIXES:
            if suffix not in module.tensors:
                continue
            stats = scale_stats(view.raw, module.member(suffix))
            if stats is None:
                continue
            if stats.nonfinite or stats.negative:
                bad.append((module.member(suffix), stats))
            elif stats.zero:
                zeros.append((module.member(suffix), stats))
    for name, s in bad:
        yield Problem(f"{name}: {s.nonfinite} non-finite and {s.negative} negative of {s.count} scales",
                      evidence={"tensor": name, "nonfinite": s.nonfinite, "negative": s.negative, "count": s.count},
                      location=at_tensor(view.raw, name))
    for name, s in zeros:
        yield Problem(f"{name}: {s.zero} of {s.count} scales are zero (those groups dequantize to 0)",
                      severity="warning", evidence={"tensor": name, "zero": s.zero, "count": s.count},
                      location=at_tensor(view.raw, name))
