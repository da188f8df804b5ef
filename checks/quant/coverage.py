"""Quantized safetensors checks (QNT), part 2: which modules are quantized against what the config declares
(ignore lists, lm_head, undeclared quantization), format-specific scales (NVFP4 global scale, FP8 blocks),
the KV-cache scales, and a summary. Part 1 (config, layouts, zeros, g_idx, scales) is checks/quant/storage.py.
"""
from __future__ import annotations

import re

from checks.quant.expected import expected_quantized, lm_head_expected_quantized
from checks.quant.values import read
from checks.quant.view import quant_view, quantized_view
from checks.quant.storage import NVFP4_MAX_ABS, _listed, at_key, at_tensor
from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key
from findings import Location
from reference_engine.files.quant.module import MARKERS

FP4_MAX = 6.0
SIDE_CONFIGS = ("quantize_config.json", "hf_quant_config.json")   # declarations outside config.json
ATTENTION = re.compile(r"^(model\.layers\.\d+\.self_attn)\.")


def _is_lm_head(prefix: str) -> bool:
    return prefix.split(".")[-1] == "lm_head"


def _skip_key(scheme) -> str:
    return {"compressed-tensors": "ignore", "bitsandbytes": "llm_int8_skip_modules"}.get(scheme.method,
                                                                                        "modules_to_not_convert")


@check("QNT007", category="quantization", severity="error", needs=("config",),
       hint="Make the config and the tensors agree: list the float modules in ignore / modules_to_not_convert "
            "(or remove the quantized ones from it), or add quantization_config for quantized tensors.")
def quantized_modules_match_config(ctx):
    """The modules stored quantized are exactly those the config says are quantized.

    Loaders decide per module from the config alone: a module listed in `ignore` / `modules_to_not_convert`
    (or excluded by GPTQ's dynamic "-:" rules) but stored packed is read as a float weight and fails or
    loads garbage; a linear layer the config quantizes but stored in float makes vLLM look for qweight and
    refuse the checkpoint. Packed tensors without any quantization_config are never dequantized at all.
    lm_head has its own check (QNT011).
    """
    view = quant_view(ctx)
    if view.qc is None:
        packed = [p for p, m in view.inv.quantized.items() if m.layout in set(MARKERS.values()) | {"fp8", "int8"}]
        side = [n for n in SIDE_CONFIGS if (ctx.model_dir / n).is_file()]
        if packed and side:   # older AutoGPTQ / ModelOpt exports: vLLM reads the side file, transformers does not
            yield Problem(f"{len(packed)} modules are stored quantized and only {side[0]} declares how: vLLM reads "
                          f"it, transformers (and llmdoctor) need quantization_config in config.json",
                          severity="warning", evidence={"modules": packed[:50], "side_config": side[0]},
                          location=config_key("quantization_config"))
        elif packed:
            yield Problem(f"{len(packed)} modules are stored quantized ({_listed(packed)}) but config.json has no "
                          f"quantization_config: loaders read them as missing float weights",
                          evidence={"modules": packed[:50]}, location=Location(file="config.json",
                                                                               logical="quantization_config"))
        return
    scheme = view.scheme
    if scheme is None:
        raise Skip("quantization_config is unusable (QNT001)")
    key = _skip_key(scheme)
    excluded = [p for p in view.inv.quantized if not _is_lm_head(p) and not expected_quantized(scheme, p)]
    undeclared = [p for p in view.inv.float_linear if not _is_lm_head(p) and expected_quantized(scheme, p)]
    if excluded:
        untargeted = [p for p in excluded if not scheme.targeted(p)]
        why = f"no config group targets them ({', '.join(scheme.targets)})" if untargeted else f"listed in {key}"
        yield Problem(f"{len(excluded)} modules are stored quantized but the config keeps them in float, {why}: "
                      f"{_listed(excluded)}", evidence={"modules": excluded[:50], "key": key},
                      location=at_key("config_groups" if untargeted else key))
    if undeclared:
        yield Problem(f"{len(undeclared)} linear modules are stored in float but the config quantizes them: "
                      f"{_listed(undeclared)}", evidence={"modules": undeclared[:50], "key": key},
                      location=at_tensor(view.raw, f"{undeclared[0]}.weight"))
    if not view.inv.quantized:
        yield Problem(f"quantization_config declares {scheme.method} but no tensor is stored quantized",
                      evidence={"float_linear": len(view.inv.float_linear)}, location=at_key("quant_method"))


@check("QNT008", category="quantization", severity="error", needs=("config",),
       hint="Store weight_global_scale as the divisor llm-compressor writes (448*6/amax), i.e. invert the "
            "stored value, or re-export with llm-compressor.")
def nvfp4_global_scale(ctx):
    """NVFP4 global scales give dequantized weights of a plausible magnitude.

    compressed-tensors stores weight_global_scale as a divisor: W = fp4 * weight_scale / weight_global_scale,
    with the FP8 block scales filling e4m3's range, so the value is in the thousands for ordinary weights. A
    global scale stored as its reciprocal multiplies every weight by its square: magnitudes off by orders of
    magnitude and logits that collapse (vLLM inverts it on load; its comment: not inverting zeroes the
    logits). The largest dequantized magnitude is 6 * max(weight_scale) / weight_global_scale per module.
    """
    view = quantized_view(ctx)
    modules = [m for m in view.inv.quantized.values() if "weight_global_scale" in m.tensors]
    if not modules:
        raise Skip("no NVFP4 module (weight_global_scale)")
    off = []
    for module in modules:
        glob = read(view.raw, module.member("weight_global_scale"))
        block = read(view.raw, module.member("weight_scale"))
        if glob is None or block is None or glob.numel() != 1 or not block.numel():
            continue
        g, top = float(glob.float().reshape(())), float(block.float().abs().max())
        amax = FP4_MAX * top / g if g else float("inf")
        if not amax <= NVFP4_MAX_ABS:
            off.append((module.prefix, g, amax, FP4_MAX * top * g))
    if off:
        prefix, g, amax, inverted = off[0]
        yield Problem(f"{prefix}: weight_global_scale {g:.4g} makes weights up to {amax:.3g} (inverted it gives "
                      f"{inverted:.3g}); {len(off)} of {len(modules)} NVFP4 modules"
                      + (f": {_listed([o[0] for o in off])}" if len(off) > 1 else ""),
                      evidence={"modules": [o[0] for o in off][:50], "global_scale": g, "max_abs": amax,
                                "max_abs_if_inverted": inverted, "limit": NVFP4_MAX_ABS},
                      location=at_tensor(view.raw, f"{prefix}.weight_global_scale"))


@check("QNT009", category="quantization", severity="error", needs=("config",),
       hint="weight_scale_inv must hold one scale per weight_block_size block: ceil(out/bo) x ceil(in/bi); "
            "fix weight_block_size or re-export.")
def fp8_block_scales(ctx):
    """Block-FP8 scales (weight_scale_inv) have one entry per weight_block_size block.

    DeepSeek-V3-style FP8 multiplies each [bo, bi] block of the fp8 weight by one weight_scale_inv entry
    (multiplied, despite the name). A scale grid of another shape (a transposed grid, a block size in the
    config that is not the one used) is broadcast wrongly or refused by the kernel.
    """
    view = quantized_view(ctx)
    bad = [m for m in view.mismatches if m.role == "block_scale"]
    if not any(m.layout == "fp8-block" for m in view.inv.quantized.values()):
        raise Skip("no block-FP8 module (weight_scale_inv)")
    if bad:
        modules = [m.module for m in bad]
        first = bad[0]
        yield Problem(f"{first.module}.weight_scale_inv: {first.found}, expected {first.expected} for "
                      f"weight_block_size {list(view.scheme.block_for(first.module) or (128, 128))}"
                      + (f" (also {_listed(modules[1:])})" if len(bad) > 1 else ""),
                      evidence={"modules": modules[:50], "found": first.found, "expected": first.expected},
                      location=at_tensor(view.raw, f"{first.module}.weight_scale_inv"))


@check("QNT010", category="quantization", severity="warning", needs=("config",),
       hint="Export the calibrated k_scale/v_scale tensors (llm-compressor with a kv_cache_scheme), or drop "
            "kv_cache_scheme and let the server pick its KV dtype.")
def kv_cache_scales_present(ctx):
    """A declared quantized KV cache comes with k_scale and v_scale for every attention layer.

    With kv_cache_scheme in the config, vLLM quantizes K and V with the stored per-layer scales; a layer
    without them silently uses 1.0 (vLLM PR #25968: Llama-3.1-70B perplexity 2.73 -> 2.89).
    """
    view = quantized_view(ctx)
    if not view.scheme.kv_cache:
        raise Skip("no kv_cache_scheme declared")
    attn = sorted({m.group(1) for name in view.raw.names if (m := ATTENTION.match(name))},
                  key=lambda prefix: int(prefix.split(".")[2]))     # the attention layers the files hold
    missing = [a for a in attn if not all(_kv_scale(view.raw, a, kv) for kv in "kv")]
    if missing:
        yield Problem(f"kv_cache_scheme is declared but {len(missing)} of {len(attn)} attention layers store no "
                      f"k_scale/v_scale ({_listed(missing)}): vLLM uses 1.0 for them",
                      evidence={"layers": missing[:50], "kv_cache_scheme": view.scheme.kv_cache},
                      location=at_key("kv_cache_scheme"))


def _kv_scale(raw, attn: str, kv: str) -> bool:
    """compressed-tensors' self_attn.k_scale, or the older k_proj.output_scale (vLLM reads both)."""
    return f"{attn}.{kv}_scale" in raw or f"{attn}.{kv}_proj.output_scale" in raw


@check("QNT011", category="quantization", severity="error", needs=("config",),
       hint="Set lm_head in quantization_config (GPTQ lm_head: true; compressed-tensors: remove it from ignore) "
            "or store lm_head in float.")
def lm_head_quantization(ctx):
    """lm_head is stored quantized exactly when the config says so.

    GPTQ quantizes lm_head only with lm_head: true; AWQ, FP8 and bitsandbytes never do; compressed-tensors
    does when a config group targets it and `ignore` does not list it. A quantized lm_head the config does
    not declare is loaded as a missing float weight (or as the tied embeddings), a float one the config
    declares quantized makes the loader look for packed tensors.
    """
    view = quantized_view(ctx)
    quantized = [p for p in view.inv.quantized if _is_lm_head(p)]
    stored_float = [p for p in view.inv.float_linear if _is_lm_head(p)]
    if not quantized and not stored_float:
        raise Skip("no lm_head tensor (tied embeddings)")
    key = "lm_head" if view.scheme.method == "gptq" else _skip_key(view.scheme)
    for prefix in quantized:
        if not lm_head_expected_quantized(view.scheme, prefix):
            yield Problem(f"{prefix} is stored quantized but quantization_config keeps it in float "
                          f"({view.scheme.method}, {key})", evidence={"module": prefix, "key": key},
                          location=at_key(key))
    for prefix in stored_float:
        if lm_head_expected_quantized(view.scheme, prefix):
            yield Problem(f"{prefix} is stored in float but quantization_config quantizes it ({key})",
                          evidence={"module": prefix, "key": key}, location=at_key(key))


@check("QNT012", category="quantization", severity="info", needs=("config",),
       hint="Compare with the float model: `llmdoctor diff BASE QUANT` (KLD, first divergent layer, error per part).")
def quantization_summary(ctx):
    """What is quantized and how: format, bits, group size, modules packed and kept in float, bytes stored.

    Info only: the census a reviewer wants before shipping a quantized checkpoint."""
    view = quantized_view(ctx)
    s = view.scheme
    layouts: dict[str, int] = {}
    for m in view.inv.quantized.values():
        layouts[m.layout] = layouts.get(m.layout, 0) + 1
    stored = sum(info.nbytes for m in view.inv.quantized.values() for info in m.tensors.values())
    logical = sum(o * i for o, i in view.logical.values())
    ratio = f", {stored * 8 / logical:.2f} bits per weight with scales" if logical else ""
    declared = [{"group": g.name, "targets": list(g.targets), "format": g.fmt or s.fmt, "bits": g.bits,
                 "group_size": g.group_size, "sym": g.sym, "actorder": g.actorder} for g in s.groups]
    how = f"bits {s.bits}, group_size {s.group_size}" if len(s.groups) <= 1 else \
        "; ".join(f"{g['group']}: {g['format']} {g['bits']}-bit g{g['group_size']}" for g in declared)
    yield Problem(f"{s.method} ({s.fmt}), {how}: {len(view.inv.quantized)} "
                  f"modules quantized, {len(view.inv.float_linear)} linear modules in float{ratio}",
                  evidence={"method": s.method, "format": s.fmt, "bits": s.bits, "group_size": s.group_size,
                            "sym": s.sym, "desc_act": s.desc_act, "groups": declared, "layouts": layouts,
                            "float_linear": view.inv.float_linear[:50], "stored_bytes": stored},
                  location=at_key("quant_method"))
