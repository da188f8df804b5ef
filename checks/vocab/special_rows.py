"""Classify the embedding/lm_head rows of special and added tokens as trained or not, from row statistics.

A row is 'zero' (max |w| == 0), 'near_zero' (max |w| tiny next to the median row), 'low_norm' (L2 norm far
below the median row), 'mean_init' (equal to the mean of the trained rows: what `llmdoctor fix` and unsloth's
fix_untrained_tokens write) or 'ok'. Used by the EMB checks and by `llmdoctor fix`, so both agree on which rows
are untrained and on what "the mean of the trained rows" is."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch
from safetensors import safe_open

NEAR_ZERO_RATIO = 1e-4     # row max|w| below this fraction of the median row's max|w|
LOW_NORM_RATIO = 0.05      # row norm below this fraction of the median row norm
MEAN_COSINE = 0.999        # a row this close in direction and norm to the trained mean is mean-initialised
MEAN_NORM_TOLERANCE = 0.02
UNTRAINED = ("zero", "near_zero", "low_norm")


@dataclass
class RowVerdict:
    id: int
    kind: str                 # zero | near_zero | low_norm | mean_init | ok
    norm: float
    amax: float


@dataclass
class MatrixVerdicts:
    name: str
    rows: int
    median_norm: float
    median_amax: float
    trained_mean: torch.Tensor          # [hidden] float32
    verdicts: dict[int, RowVerdict]
    values: dict[int, torch.Tensor]     # id -> [hidden] float32, the inspected rows

    def of_kind(self, *kinds: str) -> list[RowVerdict]:
        return [v for v in self.verdicts.values() if v.kind in kinds]


def read_rows(file, name: str, ids: list[int]) -> dict[int, torch.Tensor]:
    """Selected rows of a 2-D tensor as float32, read through safetensors slices (no full load)."""
    out = {}
    with safe_open(str(file), framework="pt") as handle:
        sl = handle.get_slice(name)
        for i in ids:
            out[i] = sl[i:i + 1].to(torch.float32).reshape(-1)
    return out


def classify(name: str, norms: torch.Tensor, amax: torch.Tensor, row_sum: torch.Tensor,
             values: dict[int, torch.Tensor], near_zero_ratio: float = NEAR_ZERO_RATIO,
             low_norm_ratio: float = LOW_NORM_RATIO) -> MatrixVerdicts:
    """Verdicts for the rows in `values` (id -> row), given every row's norm/amax and the sum of all rows."""
    rows = norms.numel()
    median_norm, median_amax = float(norms.median()), float(amax.median())
    kinds = {i: _raw_kind(float(norms[i]), float(amax[i]), median_norm, median_amax, near_zero_ratio,
                          low_norm_ratio) for i in values}
    suspects = [i for i, k in kinds.items() if k in UNTRAINED]
    trained_sum = row_sum.double() - sum((values[i].double() for i in suspects), torch.zeros_like(row_sum.double()))
    trained_mean = (trained_sum / max(1, rows - len(suspects))).to(torch.float32)   # [hidden]
    verdicts = {}
    for i, kind in kinds.items():
        if kind in ("low_norm", "ok") and is_mean_row(values[i], trained_mean):
            kind = "mean_init"
        verdicts[i] = RowVerdict(i, kind, float(norms[i]), float(amax[i]))
    return MatrixVerdicts(name, rows, median_norm, median_amax, trained_mean, verdicts, values)


def _raw_kind(norm: float, amax: float, median_norm: float, median_amax: float, near_zero_ratio: float,
              low_norm_ratio: float) -> str:
    if amax == 0.0:
        return "zero"
    if amax <= near_zero_ratio * median_amax:
        return "near_zero"
    if norm < low_norm_ratio * median_norm:
        return "low_norm"
    return "ok"


def is_mean_row(row: torch.Tensor, mean: torch.Tensor) -> bool:
    mean_norm, row_norm = float(mean.norm()), float(row.norm())
    if mean_norm == 0.0 or row_norm == 0.0:
        return False
    cosine = float(row @ mean) / (row_norm * mean_norm)
    return cosine >= MEAN_COSINE and abs(row_norm / mean_norm - 1.0) <= MEAN_NORM_TOLERANCE


def row_key(row: torch.Tensor) -> bytes:
    """The row's exact bytes, for grouping identical rows (no numpy: torch does not require it)."""
    row = row.detach().cpu().contiguous()
    return ctypes.string_at(row.data_ptr(), row.numel() * row.element_size())
