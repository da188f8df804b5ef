"""The quantized fault zoo: a tiny factory model quantized (round-to-nearest, each producer's layout and
formula, field-anchors.md "Quantized safetensors") into GPTQ v1/v2, AWQ gemm, compressed-tensors W4A16, FP8
and NVFP4, block FP8 and bitsandbytes NF4, and faults that each break one thing a QNT check looks for.

`quantize_dir(src, dst, fmt)` writes a healthy quantized copy; a Fault's `apply` edits that copy in place.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
FP8_MAX = 448.0
FP8_BLOCK = 32                      # weight_block_size for the tiny model (64..128 wide)
GROUP = 32


def is_linear(name: str) -> bool:
    return name.endswith(".weight") and ".layers." in name and name.split(".")[-2] in LINEAR


def pack(q: torch.Tensor, bits: int, dim: int, order=None) -> torch.Tensor:
    """Codes -> int32 words along `dim`, element k of each word at bits*k (or at the position `order` gives)."""
    per = 32 // bits
    q = q.movedim(dim, -1).to(torch.int64)
    q = q.reshape(*q.shape[:-1], q.shape[-1] // per, per)
    if order is not None:
        q = q[..., list(order)]
    words = (q << (torch.arange(per) * bits)).sum(-1)
    words = torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)
    return words.movedim(-1, dim).contiguous()


def rtn(w: torch.Tensor, bits: int, sym: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row round to nearest over the last dim: (codes 0..2^b-1, scale, zero) as AutoGPTQ's Quantizer."""
    maxq = (1 << bits) - 1
    lo, hi = w.min(-1, keepdim=True).values.clamp(max=0), w.max(-1, keepdim=True).values.clamp(min=0)
    if sym:
        hi = torch.maximum(lo.abs(), hi)
        lo = -hi
    scale = ((hi - lo) / maxq).clamp(min=1e-8)
    zero = torch.full_like(scale, (maxq + 1) // 2) if sym else torch.round(-lo / scale)
    q = torch.clamp(torch.round(w / scale) + zero, 0, maxq)
    return q, scale, zero


def gptq(w: torch.Tensor, bits=4, group=GROUP, sym=True, v2=False, desc_act=False, seed=0) -> dict:
    out, inp = w.shape
    perm = torch.randperm(inp, generator=torch.Generator().manual_seed(seed)) if desc_act else torch.arange(inp)
    g_idx = torch.empty(inp, dtype=torch.int32)
    g_idx[perm] = (torch.arange(inp) // group).to(torch.int32)
    wt = w.t()[perm]                                   # [in, out] in quantization order
    n = inp // group
    q, s, z = rtn(wt.reshape(n, group, out).transpose(1, 2), bits, sym)   # [G, out, group]
    codes = torch.empty(inp, out, dtype=torch.int64)
    codes[perm] = q.transpose(1, 2).reshape(inp, out).to(torch.int64)
    zeros = z.squeeze(-1).to(torch.int64) - (0 if v2 else 1)
    return {"qweight": pack(codes, bits, 0), "qzeros": pack(zeros.clamp(0, (1 << bits) - 1), bits, 1),
            "scales": s.squeeze(-1).half(), "g_idx": g_idx}


def awq(w: torch.Tensor, group=GROUP, order=AWQ_ORDER) -> dict:
    out, inp = w.shape
    n = inp // group
    q, s, z = rtn(w.t().reshape(n, group, out).transpose(1, 2), 4, False)   # [G, out, group]
    codes = q.transpose(1, 2).reshape(inp, out)
    return {"qweight": pack(codes, 4, 1, order), "qzeros": pack(z.squeeze(-1), 4, 1, order),
            "scales": s.squeeze(-1).half()}


def ct_packed(w: torch.Tensor, bits=4, group=GROUP) -> dict:
    out, inp = w.shape
    q, s, _ = rtn(w.reshape(out, inp // group, group), bits, True)      # codes already offset by 2^(b-1)
    return {"weight_packed": pack(q.reshape(out, inp), bits, 1), "weight_scale": s.squeeze(-1).half(),
            "weight_shape": torch.tensor([out, inp], dtype=torch.int64)}


def ct_fp8(w: torch.Tensor) -> dict:
    scale = (w.abs().amax(1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    return {"weight": (w / scale).to(torch.float8_e4m3fn), "weight_scale": scale.float()}


def nvfp4(w: torch.Tensor) -> dict:
    out, inp = w.shape
    glob = FP8_MAX * 6.0 / w.abs().max()
    blocks = w.reshape(out, inp // 16, 16)
    scale = (blocks.abs().amax(-1) / 6.0 * glob).to(torch.float8_e4m3fn)               # [out, in/16]
    x = blocks * glob / scale.float().clamp(min=1e-12).unsqueeze(-1)
    idx = (x.abs().unsqueeze(-1) - FP4_VALUES).abs().argmin(-1)                        # nearest magnitude
    codes = (idx | ((x < 0).to(torch.int64) << 3)).reshape(out, inp)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return {"weight_packed": packed, "weight_scale": scale,
            "weight_global_scale": glob.reshape(1).float()}


def fp8_block(w: torch.Tensor, block=FP8_BLOCK) -> dict:
    out, inp = w.shape
    tiles = w.reshape(out // block, block, inp // block, block)
    scale = (tiles.abs().amax((1, 3)) / FP8_MAX).clamp(min=1e-12)                       # [out/b, in/b]
    q = (tiles / scale[:, None, :, None]).reshape(out, inp).to(torch.float8_e4m3fn)
    return {"weight": q, "weight_scale_inv": scale.float()}


def bnb_nf4(w: torch.Tensor, double_quant=False) -> dict:
    import bitsandbytes.functional as F
    packed, state = F.quantize_4bit(w.float().contiguous(), blocksize=64, quant_type="nf4",
                                    compress_statistics=double_quant)
    return {"weight": packed, **{f"weight.{k}": v for k, v in state.as_dict(packed=True).items()}}


FORMATS: dict[str, tuple[Callable[[torch.Tensor], dict], dict]] = {
    "gptq": (lambda w: gptq(w), {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False,
                                 "sym": True, "checkpoint_format": "gptq", "lm_head": False}),
    "gptq_v2": (lambda w: gptq(w, v2=True), {"quant_method": "gptq", "bits": 4, "group_size": GROUP,
                                            "desc_act": False, "sym": True, "checkpoint_format": "gptq_v2"}),
    "gptq_act": (lambda w: gptq(w, desc_act=True, sym=False), {"quant_method": "gptq", "bits": 4,
                                                               "group_size": GROUP, "desc_act": True, "sym": False}),
    "gptq8": (lambda w: gptq(w, bits=8, group=64),
              {"quant_method": "gptq", "bits": 8, "group_size": 64, "desc_act": False, "sym": True}),
    "awq": (awq, {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm",
                  "modules_to_not_convert": None}),
    "ct_w4a16": (ct_packed, {"quant_method": "compressed-tensors", "format": "pack-quantized",
                             "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                 "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                 "group_size": GROUP}}}, "ignore": ["lm_head"]}),
    "ct_fp8": (ct_fp8, {"quant_method": "compressed-tensors", "format": "float-quantized",
                        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                            "num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}}},
                        "ignore": ["lm_head"]}),
    "nvfp4": (nvfp4, {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                          "num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group",
                          "group_size": 16}}}, "ignore": ["lm_head"]}),
    "fp8_block": (fp8_block, {"quant_method": "fp8", "activation_scheme": "dynamic",
                              "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}),
    "bnb_nf4": (bnb_nf4, {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                          "bnb_4bit_use_double_quant": False, "bnb_4bit_compute_dtype": "float32"}),
}


def quantize_dir(src: Path, dst: Path, fmt: str, *, quantize=None, qc_updates: dict | None = None) -> Path:
    """A copy of the float model `src` with its decoder linears quantized as `fmt`."""
    make, qc = FORMATS[fmt]
    make = quantize or make
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    out = {}
    for name, t in tensors.items():
        if is_linear(name):
            prefix = name[:-len(".weight")]
            out.update({f"{prefix}.{k}": v for k, v in make(t.float()).items()})
        else:
            out[name] = t
    save_file({k: v.contiguous() for k, v in out.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"] = {**qc, **(qc_updates or {})}
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


# ---- faults --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantFault:
    name: str
    fmt: str
    apply: Callable[[Path], None]
    check: str
    severity: str = "error"
    anchor: str = ""
    qc: dict = field(default_factory=dict)


def edit_qc(**updates) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        config = json.loads((d / "config.json").read_text())
        qc = config["quantization_config"]
        for k, v in updates.items():
            if v is None:
                qc.pop(k, None)
            else:
                qc[k] = v
        (d / "config.json").write_text(json.dumps(config, indent=2))
    return apply


def edit_tensors(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        tensors = load_file(str(d / "model.safetensors"))
        change(tensors)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"),
                  metadata={"format": "pt"})
    return apply


def both(*edits):
    def apply(d: Path) -> None:
        for e in edits:
            e(d)
    return apply


L0 = "model.layers.0.self_attn.q_proj"
MLP0 = "model.layers.0.mlp.down_proj"


def _drop_config(d: Path, side: bool = False) -> None:
    config = json.loads((d / "config.json").read_text())
    qc = config.pop("quantization_config")
    if side:     # where AutoGPTQ wrote it before transformers integrated GPTQ
        (d / "quantize_config.json").write_text(json.dumps(qc))
    (d / "config.json").write_text(json.dumps(config, indent=2))


def _retarget(d: Path, targets: list[str]) -> None:
    config = json.loads((d / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = targets
    (d / "config.json").write_text(json.dumps(config, indent=2))


def _set(name: str, fn):
    return edit_tensors(lambda t: t.__setitem__(name, fn(t[name])))


def _drop(*names):
    return edit_tensors(lambda t: [t.pop(n) for n in names])


def _float_module(prefix: str, fmt: str):
    """Replace a quantized module by a float weight (as if the quantizer skipped it)."""
    def change(t: dict) -> None:
        for k in [k for k in t if k.startswith(prefix + ".")]:
            t.pop(k)
        t[prefix + ".weight"] = torch.randn(64, 64) * 0.02
    return edit_tensors(change)


def _quantize_lm_head(fmt: str):
    def change(t: dict) -> None:
        w = t.pop("lm_head.weight")
        t.update({f"lm_head.{k}": v for k, v in FORMATS[fmt][0](w.float()).items()})
    return edit_tensors(change)


KV_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


def with_kv_scales(layers=(0, 1)):
    """Declare an FP8 KV cache and store calibrated k_scale/v_scale for `layers` (llm-compressor's names)."""
    def change(t: dict) -> None:
        for i in layers:
            t[f"model.layers.{i}.self_attn.k_scale"] = torch.tensor([0.02])
            t[f"model.layers.{i}.self_attn.v_scale"] = torch.tensor([0.01])
    return both(edit_qc(kv_cache_scheme=KV_SCHEME), edit_tensors(change))


def _wrap_zero(name: str):
    """Set the first zero code of a v1 qzeros to the top code: a zero point 0 stored as -1."""
    return _set(name, lambda z: z.clone().index_put_((torch.tensor([0]), torch.tensor([0])),
                                                      z[0, 0:1] | 0xF))


FAULTS = [
    QuantFault("gptq_v2_declared_v1", "gptq_v2", edit_qc(checkpoint_format="gptq"), "QNT004",
               anchor="vLLM PR #26092/#26343, Qwen3.5-27B-GPTQ PR #38966"),
    QuantFault("gptq_v1_declared_v2", "gptq", edit_qc(checkpoint_format="gptq_v2"), "QNT004"),
    QuantFault("gptq_bits_wrong", "gptq", edit_qc(bits=8), "QNT002"),
    QuantFault("gptq_group_wrong", "gptq", edit_qc(group_size=64), "QNT002"),
    QuantFault("gptq_absurd_group", "gptq", edit_qc(group_size=10 ** 9), "QNT001"),
    QuantFault("unknown_method", "gptq", edit_qc(quant_method="hqq"), "QNT001"),
    QuantFault("truncated_qweight", "gptq", _set(f"{L0}.qweight", lambda q: q[:4]), "QNT002"),
    QuantFault("packing_dtype_int16", "gptq", _set(f"{L0}.qweight", lambda q: q.to(torch.int16)), "QNT002"),
    QuantFault("missing_scales", "gptq", _drop(f"{L0}.scales"), "QNT003"),
    QuantFault("missing_zeros_awq", "awq", _drop(f"{MLP0}.qzeros"), "QNT003"),
    QuantFault("g_idx_out_of_range", "gptq_act", _set(f"{L0}.g_idx", lambda g: g + 1), "QNT005"),
    QuantFault("g_idx_permuted_no_desc_act", "gptq_act", edit_qc(desc_act=False), "QNT005"),
    QuantFault("nan_scale", "gptq", _set(f"{L0}.scales", lambda s: s.index_fill(1, torch.tensor([3]),
                                                                                  float("nan"))), "QNT006"),
    QuantFault("negative_scale", "ct_w4a16", _set(f"{L0}.weight_scale", lambda s: -s), "QNT006"),
    QuantFault("zero_scale", "awq", _set(f"{L0}.scales", lambda s: s.index_fill(0, torch.tensor([0]), 0.0)),
               "QNT006", "warning"),
    QuantFault("ignored_but_quantized", "ct_w4a16", edit_qc(ignore=["lm_head", MLP0]), "QNT007"),
    QuantFault("awq_not_convert_but_quantized", "awq", edit_qc(modules_to_not_convert=["down_proj"]), "QNT007"),
    QuantFault("float_module_undeclared", "gptq", _float_module(L0, "gptq"), "QNT007"),
    QuantFault("unknown_method_key_missing", "gptq", edit_qc(quant_method=None), "QNT001"),
    QuantFault("quantized_without_config", "gptq", lambda d: _drop_config(d), "QNT007"),
    QuantFault("declared_only_in_quantize_config_json", "gptq", lambda d: _drop_config(d, side=True), "QNT007",
               "warning"),
    QuantFault("nvfp4_global_inverted", "nvfp4", edit_tensors(lambda t: [
        t.__setitem__(k, 1.0 / v) for k, v in list(t.items()) if k.endswith("weight_global_scale")]), "QNT008",
        anchor="vLLM compressed_tensors NVFP4 comment: not inverting zeroes the logits"),
    QuantFault("fp8_block_scale_transposed", "fp8_block", _set(f"{MLP0}.weight_scale_inv", lambda s: s.t()),
               "QNT009"),
    QuantFault("fp8_block_size_wrong", "fp8_block", edit_qc(weight_block_size=[64, 64]), "QNT009"),
    QuantFault("kv_scheme_without_scales", "ct_fp8", edit_qc(kv_cache_scheme=KV_SCHEME), "QNT010",
               "warning", anchor="vLLM PR #25968"),
    QuantFault("kv_scales_for_one_layer_only", "ct_fp8", with_kv_scales(layers=(0,)), "QNT010", "warning"),
    QuantFault("ct_untargeted_but_quantized", "ct_w4a16", lambda d: _retarget(d, ["re:.*q_proj$"]), "QNT007"),
    QuantFault("gptq_v1_asym_zero_wrapped", "gptq_act", _wrap_zero(f"{L0}.qzeros"), "QNT004", "warning",
               anchor="gptqmodel: v1 asymmetric zero points overflow"),
    QuantFault("lm_head_quantized_gptq", "gptq", _quantize_lm_head("gptq"), "QNT011"),
    QuantFault("lm_head_declared_not_stored", "gptq", edit_qc(lm_head=True), "QNT011"),
    QuantFault("gptq_extra_bias_nonzero", "gptq", edit_tensors(lambda t: t.__setitem__(
        f"{MLP0}.bias", torch.full((t[f"{MLP0}.scales"].shape[1],), 0.05))), "QNT013", "warning",
        anchor="AutoGPTQ#555: a bias on every QuantLinear; vLLM skips extra GPTQ biases"),
    QuantFault("bnb_missing_quant_state", "bnb_nf4", edit_tensors(lambda t: [
        t.pop(k) for k in list(t) if k.startswith(MLP0) and ".quant_state." in k]), "QNT003"),
]
