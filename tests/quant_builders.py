"""Quantized copies of a float model directory, written by (or transcribed from) the independent quantizers,
each with the weights as that independent implementation dequantizes them: the oracle for our engine.

    build = gptq(float_dir, out_dir, bits=4, group_size=32, desc_act=True, sym=False, checkpoint_format="gptq")
    build.path                # the quantized directory (config.json carries quantization_config)
    build.dequantized         # the full state dict, quantized weights replaced by the oracle's float32
    float_copy(build, dir2)   # the oracle weights as a plain float directory (transformers loads it)

Producers and oracles, per format:
- gptq: round-to-nearest quantization (per group min/max as AutoGPTQ's Quantizer computes it); packing is a
  transcription of AutoGPTQ qlinear_cuda_old.QuantLinear.pack (bits 2/4/8 and the 3-bit word-straddling
  layout); the oracle is W = scale[g_idx] * (q - z) from the integers before packing.
- awq: AutoAWQ's pseudo_quantize_tensor (asymmetric, zero_point=True) and WQLinear_GEMM packing (interleave
  order [0,2,4,6,1,3,5,7]); oracle from the integers before packing.
- compressed-tensors: the package's own calculate_qparams, compressors (pack-quantized, float-quantized,
  nvfp4-pack-quantized) and decompressors (the oracle). Its 0.20 release no longer writes `weight_g_idx`, so
  the g_idx variant permutes groups here and packs with the package's pack_to_int32; oracle from integers.
- fp8 (block-wise): quantized per [bo, bi] block (scale = amax / 448); the oracle is transformers'
  FineGrainedFP8 dequantization (w * weight_scale_inv broadcast over blocks), transcribed.
- bitsandbytes: bitsandbytes.functional.quantize_4bit on CPU produces, dequantize_4bit is the oracle; tensors
  are named as Linear4bit's state dict stores them.
Quantized modules are the decoder layers' linear projections (q/k/v/o, gate/up/down); embeddings, norms and
lm_head stay float, as the producers do by default.
"""
from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

PROJ = re.compile(r"model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$")


@dataclass
class QuantBuild:
    path: Path
    dequantized: dict[str, torch.Tensor]        # HF name -> float32 tensor (every tensor of the model)
    quantized: list[str] = field(default_factory=list)   # logical *.weight names stored quantized
    config: dict = field(default_factory=dict)  # the quantization_config written


def load_float(src: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    src = Path(src)
    config = json.loads((src / "config.json").read_text())
    weights = {}
    for file in sorted(src.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    return config, weights


def targets(weights: dict[str, torch.Tensor], skip: tuple[str, ...] = ()) -> list[str]:
    return [n for n in weights if PROJ.match(n) and not any(s in n for s in skip)]


def write_quant_dir(src: str | Path, dst: str | Path, config: dict, qconfig: dict,
                    tensors: dict[str, torch.Tensor]) -> Path:
    """dst = src's non-weight files + config.json with quantization_config + model.safetensors of tensors."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name not in (
                "config.json", "model.safetensors.index.json"):
            shutil.copy(f, dst / f.name)
    (dst / "config.json").write_text(json.dumps({**config, "quantization_config": qconfig}, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"),
              metadata={"format": "pt"})
    return dst


def float_copy(build: QuantBuild, dst: str | Path) -> Path:
    """The oracle's dequantized weights as a plain float32 model directory (no quantization_config)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    config = json.loads((build.path / "config.json").read_text())
    config.pop("quantization_config", None)
    config["torch_dtype"] = "float32"
    for f in build.path.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "config.json":
            shutil.copy(f, dst / f.name)
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: v.float().contiguous() for k, v in build.dequantized.items()}, str(dst / "model.safetensors"))
    return dst


def _rest(weights: dict[str, torch.Tensor], quantized: list[str]) -> dict[str, torch.Tensor]:
    return {n: t for n, t in weights.items() if n not in quantized}


def _prefix(name: str) -> str:
    return name[: -len(".weight")]


# ---- GPTQ ------------------------------------------------------------------------------------------------

def autogptq_pack_rows(intweight: np.ndarray, bits: int) -> np.ndarray:
    """AutoGPTQ qlinear_cuda_old.QuantLinear.pack, the qweight loop: intweight uint32 [rows, cols] packed
    along rows, LSB first; 3 bits straddle word boundaries (10 + 1 split + 10 + 1 split + 10 per 3 words)."""
    intweight = intweight.astype(np.uint32)
    qweight = np.zeros((intweight.shape[0] // 32 * bits, intweight.shape[1]), dtype=np.uint32)
    i, row = 0, 0
    while row < qweight.shape[0]:
        if bits in (2, 4, 8):
            for j in range(i, i + (32 // bits)):
                qweight[row] |= intweight[j] << (bits * (j - i))
            i += 32 // bits
            row += 1
        elif bits == 3:
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i))
            i += 10
            qweight[row] |= intweight[i] << 30
            row += 1
            qweight[row] |= (intweight[i] >> 2) & 1
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 1)
            i += 10
            qweight[row] |= intweight[i] << 31
            row += 1
            qweight[row] |= (intweight[i] >> 1) & 0x3
            i += 1
            for j in range(i, i + 10):
                qweight[row] |= intweight[j] << (3 * (j - i) + 2)
            i += 10
            row += 1
        else:
            raise ValueError(f"AutoGPTQ packs 2, 3, 4 or 8 bits, not {bits}")
    return qweight


def _as_int32(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.astype(np.uint32).view(np.int32).copy())


def gptq_quantize(w: torch.Tensor, bits: int, group_size: int, desc_act: bool, sym: bool, v1: bool,
                  gen: torch.Generator):
    """-> q [out, in] int, zeros [groups, out] int (true zero points), scales fp16 [groups, out], g_idx [in]."""
    out_f, in_f = w.shape
    gs = in_f if group_size == -1 else group_size
    groups = math.ceil(in_f / gs)
    g_idx = torch.arange(in_f, dtype=torch.int32) // gs
    if desc_act:   # columns quantized in a permuted order: g_idx[perm[k]] = k // group_size
        perm = torch.randperm(in_f, generator=gen)
        g_idx = torch.empty(in_f, dtype=torch.int32)
        g_idx[perm] = (torch.arange(in_f) // gs).to(torch.int32)
    maxq = 2 ** bits - 1
    scales = torch.empty(groups, out_f)
    zeros = torch.empty(groups, out_f)
    for g in range(groups):   # AutoGPTQ Quantizer.find_params, per output row over the group's columns
        cols = w[:, g_idx == g]
        xmin, xmax = cols.min(1).values.clamp(max=0), cols.max(1).values.clamp(min=0)
        if sym:
            xmax = torch.maximum(xmin.abs(), xmax)
            xmin = torch.where(xmin < 0, -xmax, xmin)
        both_zero = (xmin == 0) & (xmax == 0)
        xmin, xmax = torch.where(both_zero, -1.0, xmin), torch.where(both_zero, 1.0, xmax)
        scale = (xmax - xmin) / maxq
        zero = torch.full_like(scale, (maxq + 1) // 2) if sym else torch.round(-xmin / scale)
        scales[g], zeros[g] = scale, zero.clamp(1 if v1 else 0, maxq)   # v1 stores z-1: keep it >= 0
    scales = scales.half()
    s, z = scales.float()[g_idx].T, zeros[g_idx].T           # [out, in]
    q = torch.clamp(torch.round(w / s) + z, 0, maxq)
    return q.to(torch.int64), zeros.to(torch.int64), scales, g_idx


def gptq(src, dst, *, bits: int = 4, group_size: int = 32, desc_act: bool = False, sym: bool = True,
         checkpoint_format: str = "gptq", seed: int = 0, lm_head: bool = False,
         bias: dict[str, torch.Tensor] | None = None) -> QuantBuild:
    """bias: AutoGPTQ's QuantLinear stores a `.bias` on every quantized linear (AutoGPTQ#555): the model's
    own where the architecture has one, else zeros. `bias` = {} writes that; an entry overrides one module's
    extra bias (a bias the architecture has no slot for: loaders skip it, so the oracle does too)."""
    config, weights = load_float(src)
    gen = torch.Generator().manual_seed(seed)
    names = targets(weights)
    tensors, deq = _rest(weights, names), {n: t.float() for n, t in weights.items()}
    v1 = checkpoint_format == "gptq"
    for name in names:
        q, zeros, scales, g_idx = gptq_quantize(weights[name].float(), bits, group_size, desc_act, sym, v1, gen)
        deq[name] = scales.float()[g_idx].T * (q - zeros[g_idx].T).float()
        stored_zeros = zeros - 1 if v1 else zeros
        p = _prefix(name)
        tensors[p + ".qweight"] = _as_int32(autogptq_pack_rows(q.T.numpy(), bits))          # [in*b/32, out]
        tensors[p + ".qzeros"] = _as_int32(autogptq_pack_rows(stored_zeros.T.numpy(), bits).T)  # [g, out*b/32]
        tensors[p + ".scales"] = scales                                                    # [g, out] fp16
        tensors[p + ".g_idx"] = g_idx
        if bias is not None:
            tensors.setdefault(p + ".bias", bias.get(p + ".bias", torch.zeros(q.shape[0],
                                                                               dtype=weights[name].dtype)))
    qconfig = {"quant_method": "gptq", "bits": bits, "group_size": group_size, "desc_act": desc_act, "sym": sym,
               "checkpoint_format": checkpoint_format, "damp_percent": 0.01, "static_groups": False,
               "true_sequential": True, "lm_head": lm_head}
    return QuantBuild(write_quant_dir(src, dst, config, qconfig, tensors), deq, names, qconfig)


# ---- AWQ -------------------------------------------------------------------------------------------------

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_pack_cols(intweight: torch.Tensor, bits: int = 4) -> torch.Tensor:
    """AutoAWQ WQLinear_GEMM.from_linear packing: intweight [rows, cols] -> int32 [rows, cols*bits/32],
    nibble i of word c holds column c*8 + AWQ_ORDER[i]."""
    pack_num = 32 // bits
    iw = intweight.numpy().astype(np.uint32)
    out = np.zeros((iw.shape[0], iw.shape[1] // 32 * bits), dtype=np.uint32)
    for col in range(iw.shape[1] // pack_num):
        for i in range(pack_num):
            out[:, col] |= iw[:, col * pack_num + AWQ_ORDER[i]] << (i * bits)
    return _as_int32(out)


def awq(src, dst, *, group_size: int = 32, seed: int = 0) -> QuantBuild:
    config, weights = load_float(src)
    names = targets(weights)
    tensors, deq = _rest(weights, names), {n: t.float() for n, t in weights.items()}
    max_int = 15
    for name in names:
        w = weights[name].float()                                   # [out, in]
        out_f, in_f = w.shape
        g = w.reshape(out_f, in_f // group_size, group_size)        # AutoAWQ pseudo_quantize_tensor
        max_val, min_val = g.amax(-1), g.amin(-1)
        scales = ((max_val - min_val).clamp(min=1e-5) / max_int).half()          # [out, groups]
        zeros = (-torch.round(min_val / scales.float())).clamp(0, max_int)
        s, z = scales.float().repeat_interleave(group_size, 1), zeros.repeat_interleave(group_size, 1)
        q = torch.clamp(torch.round(w / s) + z, 0, max_int)
        deq[name] = (q - z) * s
        p = _prefix(name)
        tensors[p + ".qweight"] = awq_pack_cols(q.T.to(torch.int64))               # [in, out/8]
        tensors[p + ".qzeros"] = awq_pack_cols(zeros.T.to(torch.int64))            # [in/G, out/8]
        tensors[p + ".scales"] = scales.T.contiguous()                              # [in/G, out] fp16
    qconfig = {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True,
               "version": "gemm", "modules_to_not_convert": None}
    return QuantBuild(write_quant_dir(src, dst, config, qconfig, tensors), deq, names, qconfig)


# ---- compressed-tensors ----------------------------------------------------------------------------------

def _ct():
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
    )
    from compressed_tensors.quantization.utils.helpers import (
        calculate_qparams,
        generate_gparam,
    )
    return BaseCompressor, QuantizationArgs, QuantizationConfig, QuantizationScheme, calculate_qparams, \
        generate_gparam


def _ct_qparams(w: torch.Tensor, args, calculate_qparams, global_scale=None):
    if args.strategy in ("group", "tensor_group"):
        g = w.unflatten(-1, (w.shape[-1] // args.group_size, args.group_size))
        return calculate_qparams(g.amin(-1), g.amax(-1), args, global_scale=global_scale)
    if args.strategy == "channel":
        return calculate_qparams(w.amin(-1, keepdim=True), w.amax(-1, keepdim=True), args)
    return calculate_qparams(w.amin(), w.amax(), args)


def compressed_tensors(src, dst, *, scheme: str = "W4A16", strategy: str = "group", group_size: int = 32,
                       symmetric: bool = True, g_idx: bool = False, ignore: tuple[str, ...] = ("lm_head",),
                       seed: int = 0) -> QuantBuild:
    """scheme: W4A16 / W8A16 (pack-quantized), FP8 (float-quantized; strategy tensor or channel), NVFP4A16.
    ignore: compressed-tensors ignore entries (exact module names or "re:" patterns); matching modules stay
    float."""
    BaseCompressor, QArgs, QConfig, QScheme, calculate_qparams, generate_gparam = _ct()
    config, weights = load_float(src)
    ignored = [n for n in targets(weights) if _ct_ignored(_prefix(n), ignore)]
    names = [n for n in targets(weights) if n not in ignored]
    if scheme in ("W4A16", "W8A16"):
        bits = int(scheme[1])
        args = QArgs(num_bits=bits, type="int", symmetric=symmetric, strategy=strategy,
                     group_size=group_size if strategy == "group" else None)
        fmt, input_acts = "pack-quantized", None
    elif scheme == "FP8":
        args = QArgs(num_bits=8, type="float", symmetric=True, strategy=strategy)
        input_acts = QArgs(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True)
        fmt = "float-quantized"
    elif scheme == "NVFP4A16":
        args = QArgs(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
                     scale_dtype=torch.float8_e4m3fn, zp_dtype=torch.float8_e4m3fn)
        fmt, input_acts = "nvfp4-pack-quantized", None
    else:
        raise ValueError(f"unknown scheme {scheme}")
    qscheme = QScheme(targets=["Linear"], weights=args, input_activations=input_acts)
    compressor = BaseCompressor.get_value_from_registry(fmt)
    gen = torch.Generator().manual_seed(seed)
    tensors, deq = _rest(weights, names), {n: t.float() for n, t in weights.items()}
    for name in names:
        w, p = weights[name].float(), _prefix(name)
        if g_idx:
            state = _ct_pack_g_idx(w, args, calculate_qparams, gen)
            deq[name] = state.pop("oracle")
        else:
            state = {"weight": w}
            if fmt == "nvfp4-pack-quantized":
                state["weight_global_scale"] = generate_gparam(w.amin(), w.amax())
            scale, zp = _ct_qparams(w, args, calculate_qparams, state.get("weight_global_scale"))
            state.update(weight_scale=scale, weight_zero_point=zp)
            state = compressor.compress(state, qscheme)
            deq[name] = _ct_oracle(compressor, fmt, dict(state), qscheme)
        tensors.update({f"{p}.{k}": v for k, v in state.items()})
    qconfig = QConfig(config_groups={"group_0": qscheme}, format=fmt, ignore=list(ignore),
                      quantization_status="compressed").model_dump(mode="json")
    if g_idx:   # the declaration older releases (and vLLM) read with weight_g_idx; 0.20 refuses to build it
        qconfig["config_groups"]["group_0"]["weights"]["actorder"] = "group"
    return QuantBuild(write_quant_dir(src, dst, config, qconfig, tensors), deq, names, qconfig)


def _ct_oracle(compressor, fmt: str, state: dict, qscheme) -> torch.Tensor:
    """The package's decompressor; for NVFP4 its own unpack and dequantize in float32 (decompress unpacks to
    bfloat16 and returns bfloat16, a rounding of the exact value the engine computes in float32)."""
    if fmt != "nvfp4-pack-quantized":
        return compressor.decompress(state, qscheme)["weight"].float()
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize
    m, n = state["weight_packed"].shape
    x_q = unpack_fp4_from_uint8(state["weight_packed"], m, n * 2, dtype=torch.float32)
    return dequantize(x_q=x_q, scale=state["weight_scale"].float(), args=qscheme.weights,
                      global_scale=state["weight_global_scale"], dtype=torch.float32)


def _ct_ignored(module: str, ignore) -> bool:
    return any(re.match(e[3:], module) if e.startswith("re:") else module == e for e in ignore)


def _ct_pack_g_idx(w: torch.Tensor, args, calculate_qparams, gen) -> dict:
    """Activation-ordered groups (actorder="group"): column i belongs to group g_idx[i], a permutation of
    the natural i // group_size. Packed with the package's pack_to_int32 (stored q + 2^(bits-1))."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    _out_f, in_f = w.shape
    gs, bits = args.group_size, args.num_bits
    perm = torch.randperm(in_f, generator=gen)
    g_idx = torch.empty(in_f, dtype=torch.int32)
    g_idx[perm] = (torch.arange(in_f) // gs).to(torch.int32)
    cols = w[:, perm].unflatten(-1, (in_f // gs, gs))       # [out, groups, gs]: group k's columns
    scale, zp = calculate_qparams(cols.amin(-1), cols.amax(-1), args)   # [out, groups]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    s, z = scale[:, g_idx.long()], zp[:, g_idx.long()].float()
    q = torch.clamp(torch.round(w / s) + z, lo, hi)
    state = {"weight_packed": pack_to_int32(q.to(torch.int8), bits), "weight_scale": scale,
             "weight_shape": torch.tensor(w.shape), "weight_g_idx": g_idx, "oracle": (q - z) * s}
    if not args.symmetric:
        state["weight_zero_point"] = pack_to_int32(zp.to(torch.int8), bits, packed_dim=0)
    return state


# ---- FP8 block-wise (DeepSeek-V3 / transformers FineGrainedFP8) -------------------------------------------

FP8_MAX = 448.0


def fp8_block_dequant(w: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """transformers finegrained_fp8 / DeepSeek weight_dequant: each [bo, bi] block times its scale_inv."""
    out_f, in_f = w.shape
    s = scale_inv.float().repeat_interleave(block[0], 0)[:out_f].repeat_interleave(block[1], 1)[:, :in_f]
    return w.float() * s


def fp8_block(src, dst, *, block: tuple[int, int] = (32, 32), seed: int = 0) -> QuantBuild:
    config, weights = load_float(src)
    names = targets(weights)
    tensors, deq = _rest(weights, names), {n: t.float() for n, t in weights.items()}
    bo, bi = block
    for name in names:
        w = weights[name].float()
        out_f, in_f = w.shape
        rows, cols = math.ceil(out_f / bo), math.ceil(in_f / bi)
        padded = torch.nn.functional.pad(w, (0, cols * bi - in_f, 0, rows * bo - out_f))
        amax = padded.reshape(rows, bo, cols, bi).abs().amax((1, 3)).clamp(min=1e-12)
        scale_inv = (amax / FP8_MAX).float()                                 # [rows, cols]
        s = scale_inv.repeat_interleave(bo, 0)[:out_f].repeat_interleave(bi, 1)[:, :in_f]
        q = (w / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        deq[name] = fp8_block_dequant(q, scale_inv, block)
        tensors[name] = q
        tensors[_prefix(name) + ".weight_scale_inv"] = scale_inv
    qconfig = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [bo, bi]}
    return QuantBuild(write_quant_dir(src, dst, config, qconfig, tensors), deq, names, qconfig)


# ---- bitsandbytes 4-bit ----------------------------------------------------------------------------------

def bnb_dequantize(packed: torch.Tensor, state) -> torch.Tensor:
    """bitsandbytes' own dequantization, through its device-independent implementation (backends/default:
    what the CUDA kernel computes). bitsandbytes 0.50's native CPU kernel returns wrong values when the
    blocksize exceeds a row's length (e.g. blocksize 128 on a [128, 64] weight), so it is not the oracle."""
    import bitsandbytes.functional as F
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    absmax = state.absmax
    if state.nested:
        absmax = F.dequantize_blockwise(state.absmax, state.state2) + state.offset
    return _dequantize_4bit_compute(packed.reshape(-1), absmax.float(), state.code, state.blocksize,
                                    state.shape, torch.float32)


def bnb_4bit(src, dst, *, quant_type: str = "nf4", double_quant: bool = True, blocksize: int = 64,
             skip: tuple[str, ...] = ()) -> QuantBuild:
    import bitsandbytes.functional as F
    config, weights = load_float(src)
    names = targets(weights, skip)
    tensors, deq = _rest(weights, names), {n: t.float() for n, t in weights.items()}
    for name in names:
        w = weights[name]
        packed, state = F.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type,
                                        compress_statistics=double_quant)
        deq[name] = bnb_dequantize(packed, state)
        tensors[name] = packed                                                     # uint8 [n/2, 1]
        tensors.update({f"{name}.{k}": v for k, v in state.as_dict(packed=True).items()})
    qconfig = {"quant_method": "bitsandbytes", "_load_in_4bit": True, "_load_in_8bit": False,
               "load_in_4bit": True, "load_in_8bit": False, "bnb_4bit_quant_type": quant_type,
               "bnb_4bit_use_double_quant": double_quant, "bnb_4bit_compute_dtype": "float32",
               "bnb_4bit_quant_storage": "uint8", "llm_int8_skip_modules": list(skip) or None,
               "llm_int8_threshold": 6.0, "llm_int8_has_fp16_weight": False, "llm_int8_enable_fp32_cpu_offload": False}
    return QuantBuild(write_quant_dir(src, dst, config, qconfig, tensors), deq, names, qconfig)


# ---- every listed variant --------------------------------------------------------------------------------

VARIANTS: dict[str, tuple] = {
    "gptq_v1_b4_g32_sym": (gptq, {"bits": 4, "group_size": 32}),
    "gptq_v1_b4_g32_asym_descact": (gptq, {"bits": 4, "group_size": 32, "sym": False, "desc_act": True}),
    "gptq_v2_b4_g64_asym": (gptq, {"bits": 4, "group_size": 64, "sym": False, "checkpoint_format": "gptq_v2"}),
    "gptq_v2_b8_chan_sym_descact": (gptq, {"bits": 8, "group_size": -1, "desc_act": True,
                                           "checkpoint_format": "gptq_v2"}),
    "gptq_v1_b8_g128_asym": (gptq, {"bits": 8, "group_size": 128, "sym": False}),
    "gptq_v1_b3_g32_asym": (gptq, {"bits": 3, "group_size": 32, "sym": False}),
    "gptq_v2_b2_g32_sym": (gptq, {"bits": 2, "group_size": 32, "checkpoint_format": "gptq_v2"}),
    "gptq_v1_b4_g32_bias": (gptq, {"bits": 4, "group_size": 32, "bias": {}}),
    "awq_gemm_g32": (awq, {"group_size": 32}),
    "awq_gemm_g64": (awq, {"group_size": 64}),
    "ct_w4a16_group_sym": (compressed_tensors, {"scheme": "W4A16", "group_size": 32}),
    "ct_w4a16_group_asym": (compressed_tensors, {"scheme": "W4A16", "group_size": 32, "symmetric": False}),
    "ct_w4a16_channel_asym": (compressed_tensors, {"scheme": "W4A16", "strategy": "channel", "symmetric": False}),
    "ct_w8a16_channel_sym": (compressed_tensors, {"scheme": "W8A16", "strategy": "channel"}),
    "ct_w8a16_group_asym": (compressed_tensors, {"scheme": "W8A16", "group_size": 64, "symmetric": False}),
    "ct_w4a16_group_g_idx": (compressed_tensors, {"scheme": "W4A16", "group_size": 32, "g_idx": True}),
    "ct_w4a16_group_g_idx_asym": (compressed_tensors, {"scheme": "W4A16", "group_size": 32, "g_idx": True,
                                                           "symmetric": False}),
    "ct_w4a16_ignore_down": (compressed_tensors, {"scheme": "W4A16", "ignore": ("lm_head", "re:.*down_proj")}),
    "ct_fp8_tensor": (compressed_tensors, {"scheme": "FP8", "strategy": "tensor"}),
    "ct_fp8_channel": (compressed_tensors, {"scheme": "FP8", "strategy": "channel"}),
    "ct_nvfp4": (compressed_tensors, {"scheme": "NVFP4A16"}),
    "fp8_block_32": (fp8_block, {"block": (32, 32)}),
    "fp8_block_ragged": (fp8_block, {"block": (48, 40)}),
    "bnb_nf4_dq": (bnb_4bit, {"quant_type": "nf4", "double_quant": True}),
    "bnb_nf4": (bnb_4bit, {"quant_type": "nf4", "double_quant": False}),
    "bnb_fp4_dq": (bnb_4bit, {"quant_type": "fp4", "double_quant": True}),
    "bnb_fp4": (bnb_4bit, {"quant_type": "fp4", "double_quant": False, "blocksize": 128}),
}


def build_variant(variant: str, src, dst) -> QuantBuild:
    builder, kwargs = VARIANTS[variant]
    return builder(src, dst, **kwargs)
