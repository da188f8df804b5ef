"""MXFP4 copies of the tiny gpt-oss: the experts stored as the released checkpoints store them (`*_blocks` +
`*_scales`), config.json declaring quant_method mxfp4."""
from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.reference_engine.core.tiny_models import model_dir

EXPERTS = ("gate_up_proj", "down_proj")
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [..., out, in] (in a multiple of 32) -> (blocks uint8 [..., out, in / 32, 16], scales uint8
    [..., out, in / 32]): round to nearest on the e2m1 grid with a power-of-two scale per 32 values (the
    OCP MX layout: low nibble first, exponent biased by 127)."""
    groups = w.float().reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = groups.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -100)
    exp = torch.ceil(torch.log2(amax / 6.0))                              # the largest value fits under 6
    grid = torch.tensor(FP4_VALUES)
    scaled = groups / torch.exp2(exp)
    codes = (scaled.abs()[..., None] - grid).abs().argmin(-1)             # [..., 32] magnitude index 0..7
    codes = codes | ((scaled < 0) & (codes > 0)).long() << 3              # sign bit (no negative zero)
    packed = (codes[..., 0::2] | codes[..., 1::2] << 4).to(torch.uint8)  # [..., 16]
    return packed, (exp[..., 0] + 127).to(torch.uint8)


def mxfp4_copy(src: Path, out: Path, keep_float: tuple[str, ...] = ()) -> Path:
    """src's experts stored as MXFP4 (transformers' [experts, in, out] transposed to [experts, out, in] first,
    as the released checkpoints store them), config.json declaring quant_method mxfp4."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = load_file(src / "model.safetensors")
    stored = {}
    for name, t in tensors.items():
        base = name.rsplit(".", 1)[-1]
        if base in EXPERTS and not any(k in name for k in keep_float):
            stored[name + "_blocks"], stored[name + "_scales"] = quantize_mxfp4(t.transpose(1, 2).contiguous())
        else:
            stored[name] = t
    save_file(stored, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for extra in src.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            shutil.copy(extra, out / extra.name)
    return out


@functools.cache
def mxfp4_dir(seed: int = 0) -> Path:
    source = model_dir("gpt_oss", seed)
    return mxfp4_copy(source, source.parent / f"gpt_oss-mxfp4-{seed}")
