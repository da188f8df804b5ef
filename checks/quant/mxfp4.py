"""MXFP4 checks (QNT020-QNT022): gpt-oss's experts as OpenAI ships them, `<proj>_blocks` (uint8, two e2m1 codes
a byte, [experts, out, in / 32, 16]) with `<proj>_scales` (uint8 E8M0, [experts, out, in / 32]), checked from
the safetensors headers and the scales alone (1 byte per 32 weights; the blocks are never read here).

The failures are silent: blocks written for the wrong orientation load into a reshaped nonsense matrix, scales
written without their +127 bias make every expert output ~0, and a converter that quantized attention too
(llama.cpp#16756: MXFP4 conversion broken) gives tensors transformers never reads.
"""
from __future__ import annotations

from checks.quant.storage import at_key, at_tensor, _listed
from checks.quant.values import read
from checks.quant.view import quantized_view
from checks.catalogue.registry import Problem, Skip, check
from checks.shared.weights.tensor_layout import expected_shapes
from reference_engine.files.quant.mxfp4 import BLOCKS, GROUP, SCALE_BIAS, SCALES

NAN_SCALE = 255               # E8M0 0xFF is NaN


def _mxfp4(ctx):
    view = quantized_view(ctx)
    if view.scheme.method != "mxfp4":
        raise Skip(f"not an MXFP4 checkpoint ({view.scheme.method})")
    return view


def _expected(ctx) -> dict[str, tuple[int, ...]]:
    """prefix -> logical [experts, in, out] of every 3-D (stacked experts) tensor the family's plan names."""
    return {name: shape for name, shape in expected_shapes(ctx.config).items() if len(shape) == 3}


@check("QNT020", category="quantization", severity="error", needs=("config",),
       hint="Re-export the experts: <proj>_blocks uint8 [experts, out, in/32, 16] with <proj>_scales uint8 "
            "[experts, out, in/32], for [experts, in, out] = the config's expert shapes.")
def mxfp4_shapes(ctx):
    """Every MXFP4 expert tensor stores blocks and scales shaped for the config's experts.

    transformers reshapes `<proj>_blocks` [experts, out, in/32, 16] against `<proj>_scales` [experts, out, in/32]
    and transposes to [experts, in, out]: blocks stored for the transposed orientation, a scale per 16 values
    instead of 32, a missing half or a config whose hidden_size/intermediate_size is not a multiple of 32 gives
    a load error in one runtime and a silently wrong matrix in another.

    Remedy: re-export with a converter that writes the released layout (transformers' own save of a
    quantized gpt-oss does).
    """
    view = _mxfp4(ctx)
    names = set(view.raw.names)
    for logical, (experts, inp, out) in _expected(ctx).items():
        blocks, scales = logical + BLOCKS, logical + SCALES
        if logical in names and blocks not in names:
            continue                                            # stored in float: QNT021's question
        if inp % GROUP:
            yield Problem(f"{logical}: its input size {inp} is not a multiple of {GROUP} (MXFP4 groups 32 values)",
                          evidence={"tensor": logical, "in": inp}, location=at_key("quant_method"))
            continue
        want = {blocks: ((experts, out, inp // GROUP, GROUP // 2), "U8"), scales: ((experts, out, inp // GROUP), "U8")}
        for name, (shape, dtype) in want.items():
            if name not in names:
                yield Problem(f"{name} is missing ({logical} is MXFP4: blocks and scales both)",
                              evidence={"tensor": name, "expected": list(shape)}, location=at_tensor(view.raw, name))
                continue
            info = view.raw.info(name)
            if tuple(info.shape) != shape or info.dtype != dtype:
                yield Problem(f"{name} is {info.dtype} {list(info.shape)}, expected {dtype} {list(shape)} for "
                              f"experts [{experts}, {inp}, {out}]",
                              evidence={"tensor": name, "shape": list(info.shape), "dtype": info.dtype,
                                        "expected": list(shape)}, location=at_tensor(view.raw, name))


@check("QNT021", category="quantization", severity="error", needs=("config",),
       hint="Quantize exactly the MoE experts (gate_up_proj, down_proj) and list attention, router, "
            "embeddings and lm_head in modules_to_not_convert, as the released gpt-oss checkpoints do.")
def mxfp4_coverage(ctx):
    """An MXFP4 checkpoint quantizes the experts and only the experts, as its declaration says.

    transformers' MXFP4 loader converts only the gpt-oss experts: `_blocks` stored for any other tensor is never
    read (the float parameter it replaces is left at its initialisation), experts stored in float under an
    mxfp4 declaration take another loading path in every runtime, and experts listed in
    `modules_to_not_convert` while stored as blocks are loaded by some runtimes and refused by others.

    Remedy: re-export; quantize the experts, keep everything else float.
    """
    view = _mxfp4(ctx)
    names, experts = set(view.raw.names), _expected(ctx)
    stray = sorted(n[: -len(BLOCKS)] for n in names if n.endswith(BLOCKS) and n[: -len(BLOCKS)] not in experts)
    if stray:
        yield Problem(f"{len(stray)} tensor(s) stored as MXFP4 blocks that are not MoE experts: {_listed(stray)}",
                      evidence={"tensors": stray}, location=at_tensor(view.raw, stray[0] + BLOCKS))
    float_experts = sorted(n for n in experts if n in names and n + BLOCKS not in names)
    if float_experts and len(float_experts) < len(experts):
        yield Problem(f"{len(float_experts)} of {len(experts)} expert tensors stored in float beside MXFP4 ones: "
                      f"{_listed(float_experts)}", evidence={"float": float_experts},
                      location=at_tensor(view.raw, float_experts[0]))
    elif float_experts:
        yield Problem("quant_method is mxfp4 but every expert is stored in float (no *_blocks tensor)",
                      severity="warning", evidence={"float": len(float_experts)}, location=at_key("quant_method"))
    skipped = sorted(p for p in experts if p + BLOCKS in names and view.scheme.excluded(p))
    if skipped:
        yield Problem(f"modules_to_not_convert excludes {len(skipped)} expert tensor(s) stored as MXFP4: "
                      f"{_listed(skipped)}", evidence={"tensors": skipped}, location=at_key("modules_to_not_convert"))


@check("QNT022", category="quantization", severity="error", needs=("config",),
       hint="Re-export the scales as biased E8M0 exponents (2 ** (s - 127)); a NaN (255) or far-off exponent "
            "is a broken conversion.")
def mxfp4_scale_range(ctx):
    """MXFP4 scales are finite E8M0 exponents in the range trained weights use.

    Each scale byte s multiplies 32 weights by 2 ** (s - 127); 255 is NaN. Trained expert weights sit within a
    few powers of two of 1, so exponents below `min_exponent` (default -40: a scale written without its +127
    bias lands near -127) or above `max_exponent` (default 16) make whole groups zero or enormous: the experts
    output nothing or overflow, with no load error.

    Remedy: re-export the scales (biased by 127, as the OCP MX format and the released checkpoints store them).
    """
    view = _mxfp4(ctx)
    low = ctx.threshold("QNT022", "min_exponent", -40)
    high = ctx.threshold("QNT022", "max_exponent", 16)
    for name in sorted(n for n in view.raw.names if n.endswith(SCALES) and n[: -len(SCALES)] + BLOCKS in view.raw):
        s = read(view.raw, name)
        if s is None or s.numel() == 0:
            continue
        s = s.to("cpu").long()
        nan = int((s == NAN_SCALE).sum())
        e = s[s != NAN_SCALE] - SCALE_BIAS
        off = int(((e < low) | (e > high)).sum())
        ev = {"tensor": name, "nan": nan, "out_of_range": off, "min_exponent": int(e.min()) if e.numel() else None,
              "max_exponent": int(e.max()) if e.numel() else None, "range": [low, high]}
        if nan:
            yield Problem(f"{name}: {nan} of {s.numel()} scales are 255 (NaN in E8M0)", evidence=ev,
                          location=at_tensor(view.raw, name))
        elif off:
            yield Problem(f"{name}: {off} of {s.numel()} scale exponents outside [{low}, {high}] (from "
                          f"{ev['min_exponent']} to {ev['max_exponent']})", evidence=ev,
                          location=at_tensor(view.raw, name))
