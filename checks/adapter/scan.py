"""Static facts about a LoRA adapter against its base, for the LRA checks and `diff`: which base modules each
target name reaches, how each stored module fits the base weight, and the size of each update.

Nothing here merges a model: shapes come from the headers, and the few tensors read are the adapter's own
(small) factors; the update's norm ||s B A||_F is computed from the r x r Gram matrices, never from B @ A.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from reference_engine.adapter import Adapter, LoraModule

LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
EMBEDDING_MODULES = ("embed_tokens", "lm_head", "wte", "embed_out", "output")


def base_modules(names) -> list[str]:
    """Dotted names of the base's weight-bearing modules (`x.weight` -> x)."""
    return [n[: -len(".weight")] for n in names if n.endswith(".weight")]


def layer_of(module: str) -> int | None:
    m = LAYER.search(module + ".")
    return int(m.group(1)) if m else None


def target_reach(adapter: Adapter, modules: list[str]) -> dict[str, list[str]]:
    """Each target name (or the one regex) -> the base modules it selects, as peft's check_target_module_exists:
    a list entry matches a module whose name is it or ends in `.it`; a string is a full-match regex; then
    layers_to_transform keeps only the listed layers."""
    cfg = adapter.config
    targets = cfg.target_modules
    if targets is None:
        return {}
    if isinstance(targets, str):
        if targets == "all-linear":
            return {targets: [m for m in modules if m.rsplit(".", 1)[-1] not in EMBEDDING_MODULES
                              and layer_of(m) is not None and not m.endswith("norm")]}
        try:
            pattern = re.compile(targets)
        except re.error:
            return {targets: []}
        reach = {targets: [m for m in modules if pattern.fullmatch(m)]}
    else:
        reach = {t: [m for m in modules if m == t or m.endswith("." + t)] for t in targets}
    excluded = cfg.exclude_modules
    if excluded:
        drop = (lambda m: re.fullmatch(excluded, m) is not None) if isinstance(excluded, str) else \
            (lambda m: any(m == e or m.endswith("." + e) for e in excluded))
        reach = {t: [m for m in ms if not drop(m)] for t, ms in reach.items()}
    if cfg.layers_to_transform is not None:
        keep = set(cfg.layers_to_transform)
        reach = {t: [m for m in ms if layer_of(m) in keep] for t, ms in reach.items()}
    return reach


@dataclass
class Fit:
    module: LoraModule
    problem: str | None            # why the stored tensors do not fit the base weight, or None


def expected_factor_shapes(module: LoraModule, base_shape: tuple[int, ...], rank: int,
                           fan_in_fan_out: bool) -> dict[str, tuple[int, ...]]:
    out, inp = base_shape[0], base_shape[1] if len(base_shape) > 1 else 1
    if module.is_embedding_lora:      # the embedding [vocab, hidden]: A [r, vocab], B [hidden, r]
        return {"embedding_A": (rank, out), "embedding_B": (inp, rank)}
    if fan_in_fan_out:                # Conv1D stores [in, out]
        out, inp = inp, out
    return {"A": (rank, inp), "B": (out, rank)}


def update_ratio(adapter: Adapter, module: LoraModule, base_norm: float) -> float | None:
    """||s B A||_F / ||W||_F from the factors alone (||BA||_F^2 = sum((B^T B) * (A A^T))); an embedding's
    update (B A)^T has the same norm."""
    if module.lora_a is None or module.lora_b is None or base_norm == 0:
        return None
    a = adapter.tensors.get(module.lora_a).double()
    b = adapter.tensors.get(module.lora_b).double()
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
        return None
    gram = float(((b.T @ b) * (a @ a.T)).sum())
    if not math.isfinite(gram):
        return None
    return adapter.config.scale_of(module.name) * math.sqrt(max(gram, 0.0)) / base_norm


def finite_problem(tensor: torch.Tensor) -> str | None:
    if not tensor.is_floating_point():
        return None
    bad = ~torch.isfinite(tensor)
    n = int(bad.sum())
    if not n:
        return None
    nans = int(torch.isnan(tensor).sum())
    return f"{n} non-finite values ({nans} NaN, {n - nans} Inf) of {tensor.numel()}"
