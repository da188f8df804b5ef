"""One streamed pass over every weight tensor: NaN/Inf counts, max |w| and RMS per tensor, and per-row norm and
max |w| for the embedding and lm_head. Tensors are read in row blocks with plain file reads at the offsets the
validated headers give (not through a memory map, whose touched pages would all count towards the process's
resident memory), so memory stays at one block (CHUNK_ELEMENTS values) however big the model is. Results are
cached in ctx.state["weight_scan"].

Each block of a plain file is read on the engine's read-ahead thread (reference_engine/readers/read_ahead.py)
while the block before it is reduced: done one after the other the scan costs the read plus the reduction, this
way about the larger of the two. Both buffers (the bytes read, their float32 copy) are kept from block to block:
a fresh 64 MB float32 block is page-faulted in (the kernel zeroes it) every time, which cost as much as the
reduction."""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch

from checks.shared.weights.tensor_layout import EMBED, LM_HEAD, embed_name, lm_head_name
from reference_engine.files.reads import SAFETENSORS_DTYPES
from reference_engine.readers.layer_reader import ChunkedWeights
from reference_engine.readers.read_ahead import ReadAhead

CHUNK_ELEMENTS = 1 << 24          # 16M values = 64 MB of float32 per block
PROGRESS_MIN_BYTES = 1 << 30      # show a progress line on stderr for models above 1 GiB
TINY_AMAX = 1e-15                 # rows below: squares near float32's subnormal range, norms taken in float64
# the stored dtypes the scan reduces in float32 (complex, wide unsigned and E8M0 scales are not weights it judges)
TORCH_DTYPES = {k: v for k, v in SAFETENSORS_DTYPES.items() if k not in ("C64", "U16", "U32", "U64", "F8_E8M0")}
BYTES_PER = {name: torch.empty((), dtype=dtype).element_size() for name, dtype in TORCH_DTYPES.items()}


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
    norms: torch.Tensor          # [rows] float64, L2 norm of each row (non-finite values counted as 0)
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
        roles = (embed_name(ctx.weights), lm_head_name(ctx.weights))     # any decoder's names, not only Llama's
        ctx.state["weight_scan"] = scan_weights(ctx.weights, tuple(n for n in roles if n is not None))
    return ctx.state["weight_scan"]


def scan_weights(weights, row_tensors=(EMBED, LM_HEAD), chunk_elements: int = CHUNK_ELEMENTS,
                 names: list[str] | None = None) -> WeightScan:
    """Statistics of every tensor (or only `names`), with per-row statistics for `row_tensors`."""
    # The scan is bound by reading bytes, not by arithmetic. One intra-op thread keeps it that way: on a
    # busy machine torch's thread pool spends more time synchronising than reducing (measured 2-8 s vs
    # 0.4 s for SmolLM2-135M with two cores under load).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _scan_all(weights, row_tensors, chunk_elements, weights.names if names is None else names)
    finally:
        torch.set_num_threads(threads)


def _scan_all(weights, row_tensors, chunk_elements: int, names: list[str]) -> WeightScan:
    start = time.perf_counter()
    out = WeightScan()
    total = sum(_nbytes(weights.info(n)) for n in names)
    progress = _Progress(total) if total >= PROGRESS_MIN_BYTES and sys.stderr.isatty() else None
    by_file: dict = {}
    for name in names:
        by_file.setdefault(weights.info(name).file, []).append(name)
    gguf = computed_rows(weights, chunk_elements) if getattr(weights, "dequantizes", False) else None
    # plain files: every block read on a thread while the one before it is reduced (BlockReads)
    order = [] if gguf is not None else [(weights.info(name), *span) for file_names in by_file.values()
                                        for name in file_names if weights.info(name).dtype in TORCH_DTYPES
                                        for span in row_spans(weights.info(name), chunk_elements)]
    blocks = BlockReads(weights, order)
    try:
        for file_names in by_file.values():
            for name in file_names:
                info = weights.info(name)
                if info.dtype not in TORCH_DTYPES:
                    continue  # packed sub-byte formats (F4, F6): WGT004 reports them, values are not read
                want_rows = name in row_tensors and len(info.shape) == 2
                if gguf is not None:    # GGUF: dequantized a block of rows at a time
                    read = gguf(name, info)
                else:                   # the reads drop their pages: the scan holds no weights (memory.md)
                    def read(first, rows, per_row, info=info):
                        return blocks.read(info, first, rows, per_row)
                out.tensors[name], rows = _scan_tensor(read, info, want_rows, chunk_elements)
                if rows is not None:
                    out.rows[name] = rows
                if progress:
                    progress.advance(_nbytes(info))
            if gguf is None:        # and what the kernel's readahead pulled in past each tensor's end
                blocks.reader.drop_all()
    finally:
        blocks.close()
    if progress:
        progress.done()
    out.seconds = time.perf_counter() - start
    return out


def _scan_tensor(read, info, want_rows: bool, chunk_elements: int):
    """read(first_row, rows, per_row) -> float32 [rows, per_row]: the tensor's leading-dimension rows."""
    stats = TensorStats(info.name, info.dtype, math.prod(info.shape))
    if stats.numel == 0:
        return stats, None
    norms, amaxes, row_sum = [], [], None
    for begin, count, per_row in row_spans(info, chunk_elements):
        block = read(begin, count, per_row)                      # [rows, per_row] float32
        row_norm = torch.linalg.vector_norm(block, dim=1)        # [rows] float32; NaN/Inf propagate into it
        finite = bool(torch.isfinite(row_norm).all())
        if not finite:
            block, row_norm = _without_nonfinite(block, stats)
        row_amax = torch.maximum(block.amax(dim=1), -block.amin(dim=1))   # [rows], no |block| copy
        row_norm = exact_norms(block, row_norm, row_amax, finite)   # [rows] float64
        stats.amax = max(stats.amax, float(row_amax.max()))
        stats.sumsq += float(row_norm.square().sum())
        if want_rows:
            norms.append(row_norm)
            amaxes.append(row_amax)
            part = column_sums(block)                            # [hidden] float64
            row_sum = part if row_sum is None else row_sum + part
    rows = RowStats(info.name, torch.cat(norms), torch.cat(amaxes), row_sum) if want_rows else None
    return stats, rows


def row_spans(info, chunk_elements: int) -> list[tuple[int, int, int]]:
    """(first row, rows, values per row) of each block the scan reads of a tensor, in order."""
    numel = math.prod(info.shape)
    if numel == 0:
        return []
    lead = info.shape[0] if info.shape else 1
    per_row = max(1, numel // lead)
    step = max(1, chunk_elements // per_row)
    return [(begin, min(step, lead - begin), per_row) for begin in range(0, lead, step)]


class BlockReads:
    """read(info, first, rows, per_row) -> float32 [rows, per_row], valid until the next call. `order` lists
    (info, first, rows, per_row) in the order the blocks will be asked for; the one after each is read ahead
    (into the read-ahead's slot 0, free again once the block before it is converted). A block asked for out of
    order is read there and then."""

    def __init__(self, weights, order: list[tuple]):
        self.order = order
        self.reader = ChunkedWeights(weights)          # plain reads at the validated offsets, pages let go after
        self.ahead = ReadAhead("llmdoctor-scan-read")
        self._f32 = torch.empty(0, dtype=torch.float32)
        self._position = {(info.name, first): k for k, (info, first, _, _) in enumerate(order)}

    def read(self, info, first: int, rows: int, per_row: int) -> torch.Tensor:
        k = self._position.get((info.name, first))
        raw = self.ahead.take(k) if k is not None else None
        if raw is None:
            self.ahead.clear()                         # a read in flight finishes before its buffer is reused
            raw = self._read(info, first, rows, per_row, self.ahead.buffer(0, rows * per_row * BYTES_PER[info.dtype]))
        n = rows * per_row
        if self._f32.numel() < n:
            self._f32 = torch.empty(0, dtype=torch.float32)           # let the small one go first
            self._f32 = torch.empty(n, dtype=torch.float32)
        block = self._f32[:n].view(rows, per_row)
        block.copy_(raw.view(TORCH_DTYPES[info.dtype]).view(rows, per_row))
        if k is not None and k + 1 < len(self.order):                # the raw buffer is free again: read on
            following = self.order[k + 1]
            self.ahead.queue(k + 1, lambda out: self._read(*following, out), 0,
                             following[2] * following[3] * BYTES_PER[following[0].dtype])
        return block

    def _read(self, info, first: int, rows: int, per_row: int, out: torch.Tensor) -> torch.Tensor:
        return self.reader.raw_rows(info, first, first + rows, out)

    def close(self) -> None:
        self.ahead.close()
        self.reader.close()


def computed_rows(weights, chunk_elements: int):
    """For a table whose tensors are computed by get() (GGUF, quantized safetensors, a merged adapter): name, info
    -> read(first_row, rows, per_row). A GGUF is read a block of rows at a time; the others dequantize or merge
    one module at a time, so get() of one tensor is what they hold at once anyway."""
    if getattr(weights, "gguf", None) is not None:
        return gguf_rows(weights, chunk_elements)

    def reader_for(name: str, info):
        tensor = weights.get(name).to(torch.float32)
        flat = tensor.reshape(info.shape[0] if info.shape else 1, -1)          # [lead, per_row]
        return lambda first, rows, per_row: flat[first:first + rows]
    return reader_for


def gguf_rows(weights, chunk_elements: int):
    """For a GGUFWeights: name, info -> read(first_row, rows, per_row) of the dequantized tensor. Rows of a
    tensor stored in its Hugging Face order are read and dequantized a block at a time (statistics do not care
    that Q/K rows are stored permuted); small or 1-D tensors (norms, whose stored offset must be undone) whole."""
    from reference_engine.readers.chunked import chunked_reader
    reader = chunked_reader(weights, True)

    def reader_for(name: str, info):
        stored = reader.stored(name)
        if math.prod(info.shape) <= chunk_elements or len(info.shape) < 2 or \
                tuple(info.shape) != tuple(reversed(stored.dims)):
            tensor = reader.get(name).to(torch.float32)
            flat = tensor.reshape(info.shape[0] if info.shape else 1, -1)      # [lead, per_row]
            return lambda first, rows, per_row: flat[first:first + rows]
        def read(first, rows, per_row):
            k = per_row // stored.dims[0]                                      # stored rows per leading row
            return reader.stored_rows(name, first * k, (first + rows) * k).reshape(rows, per_row).float()
        return read
    return reader_for


def _without_nonfinite(block: torch.Tensor, stats: TensorStats) -> tuple[torch.Tensor, torch.Tensor]:
    """Count NaN/Inf into stats and return the block with them zeroed, and its row norms (the slow path)."""
    nan, inf = torch.isnan(block), torch.isinf(block)
    stats.nan += int(nan.sum())
    stats.inf += int(inf.sum())
    block = block.masked_fill(nan | inf, 0.0)
    return block, torch.linalg.vector_norm(block, dim=1)


def column_sums(block: torch.Tensor) -> torch.Tensor:
    """Sum of the rows of a float32 [rows, cols] block as float64 [cols]; in float64 only when float32 overflows
    (a float64 reduction of the whole block costs more than reading it)."""
    part = block.sum(dim=0)
    return part.double() if bool(torch.isfinite(part).all()) else block.double().sum(dim=0)


def exact_norms(block: torch.Tensor, fast: torch.Tensor, amax: torch.Tensor, finite: bool = False) -> torch.Tensor:
    """Row norms as float64 [rows], exact where float32 cannot hold them.

    Squares of float32 values overflow above ~1.8e19 (a row holding 1e20 would get an infinite norm) and leave the
    normal range below ~1e-19 (a row of 1e-30 would get norm 0 and pass for "zero/untrained"). Such rows are
    recomputed in float64, where no finite float32 value can overflow or underflow. Every other row keeps the
    float32 norm (relative error ~1e-7): reducing the whole block in float64 made the scan of SmolLM2 4x slower
    (benchmarks/weight_scan.py), and the scan should stay bound by reading bytes. `finite`: the float32 norms
    were all finite (no overflow to look for)."""
    norms = fast.double()
    if finite and not bool((amax < TINY_AMAX).any()):        # the usual block: one reduction decides
        return norms
    risky = ~torch.isfinite(fast) | ((amax < TINY_AMAX) & (amax > 0))
    if bool(risky.any()):
        index = risky.nonzero().flatten()
        norms[index] = torch.linalg.vector_norm(block[index].double(), dim=1)
    return norms


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
