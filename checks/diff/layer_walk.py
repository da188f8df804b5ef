"""Where two models part ways: both run on the same tokens with capture hooks, and every hook point (embedding,
per layer input norm, attention, post norm, MLP, residual stream; final norm, logits) is compared.

Two passes of the candidate against one recorded pass of the reference:
- propagated: the candidate runs freely; the error at a point is everything accumulated up to it, and the
  residual stream's NMSE after layer i minus after layer i-1 (in dB) is what layer i adds;
- isolated: every point of the candidate is compared and then REPLACED by the reference's value, so each
  sub-module sees the reference's input and its NMSE is its own error alone (the golden method's bisection with
  a second model as the golden reference). A perturbed v_proj in layer k shows up at (k, attn) and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from checks.diff.tensor_stats import activation_diff, to_db

LAYER_MODULES = ("input_norm", "attn", "post_norm", "mlp", "hidden")
ORDER = {"embed": 0, "input_norm": 1, "attn": 2, "post_norm": 3, "mlp": 4, "hidden": 5, "final_norm": 6,
         "logits": 7}


@dataclass(frozen=True)
class PointDiff:
    layer: int                 # -1 for the embedding, num_layers for final_norm/logits
    module: str
    nmse: float
    cosine: float

    @property
    def db(self) -> float:
        return to_db(self.nmse)

    @property
    def where(self) -> str:
        if self.module == "embed":
            return "embedding"
        if self.module in ("final_norm", "logits"):
            return self.module
        return f"layer {self.layer} {self.module}"


class Recorder:
    """Reference pass: keeps every point's tensor (float32, CPU)."""

    def __init__(self):
        self.tensors: dict[tuple[int, str], torch.Tensor] = {}

    def __call__(self, layer: int, module: str, x: torch.Tensor):
        self.tensors[(layer, module)] = x.detach().float().cpu().clone()
        return None


class Comparer:
    """Candidate pass: compares each point with the reference's; with isolate=True returns the reference's
    tensor so the next sub-module starts from the reference's input."""

    def __init__(self, reference: dict[tuple[int, str], torch.Tensor], isolate: bool):
        self.reference, self.isolate = reference, isolate
        self.points: list[PointDiff] = []
        self.mismatched: list[str] = []

    def __call__(self, layer: int, module: str, x: torch.Tensor):
        ref = self.reference.get((layer, module))
        if ref is None or tuple(ref.shape) != tuple(x.shape):
            self.mismatched.append(f"{layer}:{module}")
            return None
        nmse, cos = activation_diff(ref, x.detach().float().cpu())
        self.points.append(PointDiff(layer, module, nmse, cos))
        if self.isolate:
            return ref.to(device=x.device, dtype=x.dtype)
        return None


@dataclass
class LayerTrace:
    propagated: list[PointDiff]
    isolated: list[PointDiff]
    num_layers: int
    tokens: int

    def first_crossing(self, threshold_db: float, isolated: bool = False) -> PointDiff | None:
        points = self.isolated if isolated else self.propagated
        return next((p for p in sorted(points, key=_order) if p.db > threshold_db), None)

    def largest_own(self) -> PointDiff | None:
        """The sub-module with the largest error of its own (isolated pass), residual points excluded."""
        own = [p for p in self.isolated if p.module != "hidden" and p.nmse > 0]
        return max(own, key=lambda p: p.nmse) if own else None

    def residual_db(self) -> list[float]:
        """Propagated residual-stream NMSE (dB) after each layer."""
        by_layer = {p.layer: p.db for p in self.propagated if p.module == "hidden"}
        return [by_layer.get(i, float("nan")) for i in range(self.num_layers)]

    def added_db(self) -> list[float | None]:
        """dB each layer adds to the residual stream's error (None where the error before it was zero)."""
        embed = next((p.db for p in self.propagated if p.module == "embed"), float("-inf"))
        out, before = [], embed
        for now in self.residual_db():
            out.append(None if before == float("-inf") or now == float("-inf") else now - before)
            before = now
        return out

    def own_db(self, module: str) -> list[float]:
        by_layer = {p.layer: p.db for p in self.isolated if p.module == module}
        return [by_layer.get(i, float("nan")) for i in range(self.num_layers)]

    def point(self, layer: int, module: str, isolated: bool = False) -> PointDiff | None:
        points = self.isolated if isolated else self.propagated
        return next((p for p in points if p.layer == layer and p.module == module), None)


def _order(p: PointDiff) -> tuple[int, int]:
    return p.layer, ORDER.get(p.module, 9)


def trace(ref_engine, cand_engine, ids: list[int]) -> LayerTrace:
    """Record the reference once, then run the candidate propagated and isolated on the same ids."""
    recorder = Recorder()
    ref_engine.logits(ids, capture=recorder)
    propagated = Comparer(recorder.tensors, isolate=False)
    cand_engine.logits(ids, capture=propagated)
    isolated = Comparer(recorder.tensors, isolate=True)
    cand_engine.logits(ids, capture=isolated)
    layers = max((k[0] for k in recorder.tensors), default=0)
    return LayerTrace(propagated.points, isolated.points, layers, len(ids))


def table_rows(t: LayerTrace) -> list[dict]:
    """One row per layer: propagated residual dB/cosine, dB added, isolated dB of attention and MLP."""
    added = t.added_db()
    rows = []
    for i in range(t.num_layers):
        hidden = t.point(i, "hidden")
        attn, mlp = t.point(i, "attn", True), t.point(i, "mlp", True)
        rows.append({"layer": i, "hidden_db": _r(hidden.db if hidden else None),
                     "hidden_cos": _r(hidden.cosine if hidden else None, 6), "added_db": _r(added[i]),
                     "attn_own_db": _r(attn.db if attn else None), "mlp_own_db": _r(mlp.db if mlp else None),
                     "norms_own_db": _r(max((p.db for p in (t.point(i, "input_norm", True),
                                                             t.point(i, "post_norm", True)) if p), default=None))})
    return rows


def _r(value, digits: int = 2):
    if value is None:
        return None
    if value in (float("inf"), float("-inf")) or value != value:
        return value
    return round(float(value), digits)
