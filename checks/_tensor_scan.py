"""One streamed pass over every weight tensor: NaN/Inf counts, max |w| and RMS per tensor, and per-row norm and
max |w| for the embedding and lm_head. Tensors are read in row blocks through safetensors slices, so memory stays
at one block (CHUNK_ELEMENTS floats) however big the model is. Results are cached in ctx.state["weight_scan"]."""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch
from safetensors import safe_open

from ._tensor_layout import EMBED, LM_HEAD

CHUNK_ELEMENTS = 1 << 24          # 16M values = 64 MB of float32 per block
PROGRESS_MIN_BYTES = 1 << 30      # show a progress line on stderr for models above 1 GiB
BYTES_PER = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass
class TensorStats:
    name: str
    dtype: str
    numel: int
    nan: int = 0
    inf: int = 0
    amax: float = 0.0           # over finite values
    sumsq: float = 0.0          # over finite values

    @property
    def rms(self) -> float:
        return math.sqrt(self.sumsq / self.numel) if self.numel else 0.0

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf


@dataclass
class RowStats:
    """Per-row statistics of a [rows, hidden] matrix (embedding or lm_head)."""
    name: str
    norms: torch.Tensor          # [rows] float32, L2 norm of each row (non-finite values counted as 0)
    amax: torch.Tensor           # [rows] float32, max |w| of each row
    row_sum: torch.Tensor        # [hidden] float64, sum of all rows (for the mean of trained rows)


@dataclass
class WeightScan:
    tensors: dict[str, TensorStats] = field(default_factory=dict)
    rows: dict[str, RowStats] = field(default_factory=dict)
    seconds: float = 0.0


def weight_scan(ctx) -> WeightScan:
    """The cached scan of ctx.weights (built on first use)."""
    if "weight_scan" not in ctx.state:
        ctx.state["weight_scan"] = scan_weights(ctx.weights)
    return ctx.state["weight_scan"]


def scan_weights(weights, row_tensors=(EMBED, LM_HEAD), chunk_elements: int = CHUNK_ELEMENTS) -> WeightScan:
    start = time.perf_counter()
    out = WeightScan()
    total = sum(_nbytes(weights.info(n)) for n in weights.names)
    progress = _Progress(total) if total >= PROGRESS_MIN_BYTES and sys.stderr.isatty() else None
    by_file: dict = {}
    for name in weights.names:
        by_file.setdefault(weights.info(name).file, []).append(name)
    for file, names in by_file.items():
        with safe_open(str(file), framework="pt") as handle:
            for name in names:
                info = weights.info(name)
                want_rows = name in row_tensors and len(info.shape) == 2
                out.tensors[name], rows = _scan_tensor(handle, info, want_rows, chunk_elements)
                if rows is not None:
                    out.rows[name] = rows
                if progress:
                    progress.advance(_nbytes(info))
    if progress:
        progress.done()
    out.seconds = time.perf_counter() - start
    return out


def _scan_tensor(handle, info, want_rows: bool, chunk_elements: int):
    stats = TensorStats(info.name, info.dtype, math.prod(info.shape))
    if stats.numel == 0:
        return stats, None
    sl = handle.get_slice(info.name)
    lead = info.shape[0] if info.shape else 1
    per_row = max(1, stats.numel // lead)
    step = max(1, chunk_elements // per_row)
    norms, amaxes, row_sum = [], [], None
    for begin in range(0, lead, step):
        block = (sl[begin:begin + step] if info.shape else sl[:]).to(torch.float32)
        block = block.reshape(-1, per_row) if info.shape else block.reshape(1, -1)  # [rows, per_row]
        finite = torch.isfinite(block)
        if not bool(finite.all()):
            stats.nan += int(torch.isnan(block).sum())
            stats.inf += int(torch.isinf(block).sum())
            block = torch.where(finite, block, torch.zeros((), dtype=block.dtype))
        row_amax = block.abs().amax(dim=1)                       # [rows]
        row_sq = block.square().sum(dim=1)                       # [rows]
        stats.amax = max(stats.amax, float(row_amax.max()))
        stats.sumsq += float(row_sq.double().sum())
        if want_rows:
            norms.append(row_sq.sqrt())
            amaxes.append(row_amax)
            part = block.double().sum(dim=0)                     # [hidden]
            row_sum = part if row_sum is None else row_sum + part
    rows = RowStats(info.name, torch.cat(norms), torch.cat(amaxes), row_sum) if want_rows else None
    return stats, rows


def _nbytes(info) -> int:
    return math.prod(info.shape) * BYTES_PER.get(info.dtype, 4)


class _Progress:
    """A one-line progress indicator on stderr for big models (the scan reads every byte once)."""

    def __init__(self, total: int):
        self.total, self.seen, self.last = total, 0, 0.0

    def advance(self, nbytes: int) -> None:
        self.seen += nbytes
        now = time.perf_counter()
        if now - self.last > 0.5:
            self.last = now
            sys.stderr.write(f"\rscanning weights {100 * self.seen / self.total:5.1f}% "
                             f"({self.seen / 2**30:.1f}/{self.total / 2**30:.1f} GiB)")
            sys.stderr.flush()

    def done(self) -> None:
        sys.stderr.write("\r" + " " * 60 + "\r")
        sys.stderr.flush()
