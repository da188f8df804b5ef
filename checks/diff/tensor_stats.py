"""Comparing two tensors that should hold the same thing: NMSE (also in dB), max |Δ|, cosine; and matching
tensors of two checkpoints by role (layer + part) across naming schemes (Hugging Face vs GGUF names)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from reference_engine.files.gguf_arch import SHARED_NAMES, GGUFArch, hf_tensor_name

ROWS_PER_STEP = 4096          # rows compared at a time: a 150k x 8k embedding never needs a float64 copy

_HF_LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class TensorDiff:
    role: str                  # "layers.3.self_attn.v_proj.weight" (layer-independent naming)
    layer: int | None
    shape: tuple[int, ...]
    nmse: float                # sum (b - a)^2 / sum a^2; inf when a is all zero and b is not
    max_abs: float
    cosine: float
    stored: str = ""           # how the candidate stores it when quantized ("gptq 4-bit g128"), else ""

    @property
    def part(self) -> str:
        """The role without its layer: "self_attn.v_proj.weight" (what quantization error is summarised by)."""
        return self.role.split(".", 2)[2] if self.layer is not None else self.role

    @property
    def nmse_db(self) -> float:
        return to_db(self.nmse)


def to_db(nmse: float) -> float:
    """10 log10(NMSE); -inf for identical tensors."""
    if nmse <= 0:
        return float("-inf")
    return 10 * math.log10(nmse) if math.isfinite(nmse) else float("inf")


def role_of(name: str, arch: GGUFArch | None = None) -> tuple[str, int | None]:
    """(role, layer) of a tensor name in either scheme; the role is the HF name without the `model.` prefix.
    A llama.cpp name is translated by the engine's own map (gguf_arch.hf_tensor_name) for `arch`, since a name
    can mean different tensors per architecture (Gemma 3's ffn_norm is pre_feedforward_layernorm); without an
    arch, the names every architecture shares."""
    name = hf_tensor_name(name, arch or SHARED_NAMES) or name
    m = _HF_LAYER.match(name)
    if m:
        return f"layers.{m.group(1)}.{m.group(2)}", int(m.group(1))
    return (name[len("model."):] if name.startswith("model.") else name), None


def match_roles(ref_names, cand_names, ref_arch: GGUFArch | None = None,
                cand_arch: GGUFArch | None = None) -> tuple[list[tuple[str, str, str]], list[str], list[str]]:
    """([(role, ref_name, cand_name)], ref-only names, cand-only names), in the reference's order; the archs
    translate the GGUF names of a side that has them (see role_of)."""
    cand_by_role = {role_of(n, cand_arch)[0]: n for n in cand_names}
    ref_roles = {role_of(n, ref_arch)[0] for n in ref_names}
    pairs, ref_only = [], []
    for name in ref_names:
        role = role_of(name, ref_arch)[0]
        if role in cand_by_role:
            pairs.append((role, name, cand_by_role[role]))
        else:
            ref_only.append(name)
    cand_only = [n for n in cand_names if role_of(n, cand_arch)[0] not in ref_roles]
    return pairs, ref_only, cand_only


def stored_as(weights, name: str) -> str:
    """How a tensor table stores `name` when it dequantizes it (QuantizedWeights.modules), else ""."""
    module = getattr(weights, "modules", {}).get(name) if isinstance(getattr(weights, "modules", None), dict) \
        else None
    return (getattr(module, "scheme", "") or "quantized") if module is not None else ""


def by_part(diffs: list[TensorDiff]) -> list[dict]:
    """Per part (q_proj, down_proj, ...): tensors, mean and worst NMSE in dB, worst first."""
    parts: dict[str, list[TensorDiff]] = {}
    for d in diffs:
        parts.setdefault(d.part, []).append(d)
    rows = []
    for part, items in parts.items():
        mean = sum(d.nmse for d in items) / len(items)
        worst = max(items, key=lambda d: d.nmse)
        rows.append({"part": part, "tensors": len(items), "mean_nmse_db": _rounded(to_db(mean)),
                     "worst_nmse_db": _rounded(worst.nmse_db), "worst": worst.role,
                     "stored": sorted({d.stored for d in items if d.stored})})
    return sorted(rows, key=lambda r: -(r["mean_nmse_db"] if r["mean_nmse_db"] is not None else -1e9))


def _rounded(x: float):
    return round(x, 2) if math.isfinite(x) else None


def compare(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float]:
    """(nmse, max |b - a|, cosine) of two same-shape tensors, accumulated in float64 a slice at a time."""
    a2 = a.reshape(a.shape[0] if a.dim() else 1, -1)
    b2 = b.reshape(a2.shape)
    err = ref = dot = bb = 0.0
    max_abs = 0.0
    for start in range(0, a2.shape[0], ROWS_PER_STEP):
        x = a2[start:start + ROWS_PER_STEP].double()
        y = b2[start:start + ROWS_PER_STEP].double()
        d = y - x
        err += float((d * d).sum())
        ref += float((x * x).sum())
        dot += float((x * y).sum())
        bb += float((y * y).sum())
        if d.numel():
            max_abs = max(max_abs, float(d.abs().max()))
    return nmse_from(err, ref), max_abs, cosine_from(dot, ref, bb)


def nmse_from(err: float, ref: float) -> float:
    if err == 0:
        return 0.0
    return err / ref if ref > 0 else float("inf")


def cosine_from(dot: float, aa: float, bb: float) -> float:
    if aa == 0 and bb == 0:
        return 1.0
    if aa == 0 or bb == 0:
        return 0.0
    return max(-1.0, min(1.0, dot / math.sqrt(aa * bb)))


def activation_diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(nmse, cosine) of two activations [tokens, hidden]: cosine is the mean over tokens (per-token direction)."""
    x, y = a.double(), b.double()
    d = y - x
    nmse = nmse_from(float((d * d).sum()), float((x * x).sum()))
    nx, ny = x.norm(dim=-1), y.norm(dim=-1)
    both_zero = (nx == 0) & (ny == 0)
    cos = torch.where(both_zero, torch.ones_like(nx), (x * y).sum(-1) / (nx * ny).clamp_min(1e-300))
    return nmse, float(cos.clamp(-1, 1).mean())
