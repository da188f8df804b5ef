"""Activation capture for the engine's `capture=` hook: per layer and sub-module statistics, optionally tensors.

Hook points, in call order: (-1, "embed"); for each layer i: (i, "input_norm"), (i, "attn"),
(i, "post_norm"), (i, "mlp"), (i, "hidden"); then (L, "final_norm") and (L, "logits").
`first_nonfinite()` / `first_exceeding()` name the first point where values go NaN/Inf or explode.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MODULES = ("embed", "input_norm", "attn", "post_norm", "mlp", "hidden", "final_norm", "logits")


@dataclass(frozen=True)
class ActivationStat:
    layer: int
    module: str
    shape: tuple[int, ...]
    max_abs: float          # over finite values (nan when none is finite)
    mean_abs: float
    rms: float
    nonfinite: int          # count of NaN/Inf values
    first_nonfinite_token: int | None   # row (packed token index) of the first NaN/Inf


def activation_stat(layer: int, module: str, x: torch.Tensor) -> ActivationStat:
    x = x.detach().float()
    finite = torch.isfinite(x)
    nonfinite = int((~finite).sum())
    first = None
    if nonfinite:
        first = int((~finite).reshape(x.shape[0], -1).any(-1).nonzero()[0, 0]) if x.dim() else 0
        x = x[finite]
    if x.numel() == 0:
        nan = float("nan")
        return ActivationStat(layer, module, tuple(finite.shape), nan, nan, nan, nonfinite, first)
    a = x.abs()
    return ActivationStat(layer, module, tuple(finite.shape), float(a.max()), float(a.mean()),
                          float(x.pow(2).mean().sqrt()), nonfinite, first)


class ActivationRecorder:
    """A capture hook that records an ActivationStat for every point (and the tensor itself with keep=True)."""

    def __init__(self, keep: bool = False, modules: tuple[str, ...] = MODULES):
        self.keep, self.modules = keep, set(modules)
        self.stats: list[ActivationStat] = []
        self.tensors: dict[tuple[int, str], torch.Tensor] = {}

    def __call__(self, layer: int, module: str, x: torch.Tensor) -> None:
        if module not in self.modules:
            return None
        self.stats.append(activation_stat(layer, module, x))
        if self.keep:
            self.tensors[(layer, module)] = x.detach().clone()
        return None

    def first_nonfinite(self) -> ActivationStat | None:
        return next((s for s in self.stats if s.nonfinite), None)

    def first_exceeding(self, threshold: float) -> ActivationStat | None:
        return next((s for s in self.stats if s.nonfinite or s.max_abs > threshold), None)

    def by_layer(self) -> dict[int, dict[str, ActivationStat]]:
        out: dict[int, dict[str, ActivationStat]] = {}
        for s in self.stats:
            out.setdefault(s.layer, {})[s.module] = s
        return out
