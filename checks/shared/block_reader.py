"""The weight scan's row blocks, each read on a thread while the block before it is reduced.

The scan (tensor_scan.py) reads every byte of the model once, a block of rows at a time, and reduces each block
(norms, max |w|). Done one after the other it costs the read plus the reduction; with the next block read on a
thread meanwhile (`os.preadv` and torch's reductions both run outside the GIL), about the larger of the two.
Both buffers are kept from block to block: a fresh 64 MB float32 block is page-faulted in (the kernel zeroes it)
every time, which cost as much as the reduction.
"""
from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from reference_engine.files.reads import SAFETENSORS_DTYPES, FileHandles, read_range


def row_blocks(info, chunk_elements: int) -> list[tuple[int, int, int]]:
    """(first row, rows, values per row) of each block the scan reads of a tensor, in order."""
    numel = math.prod(info.shape)
    if numel == 0:
        return []
    lead = info.shape[0] if info.shape else 1
    per_row = max(1, numel // lead)
    step = max(1, chunk_elements // per_row)
    return [(begin, min(step, lead - begin), per_row) for begin in range(0, lead, step)]


class BlockReader:
    """read(info, first, rows, per_row) -> float32 [rows, per_row], valid until the next call. `order` lists
    (info, first, rows, per_row) in the order the blocks will be asked for; the one after each is read ahead.
    A block asked for out of order is read there and then."""

    def __init__(self, order: list[tuple]):
        self.order = order
        self.files = FileHandles()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="llmdoctor-scan-read")
        self._raw = torch.empty(0, dtype=torch.uint8)
        self._f32 = torch.empty(0, dtype=torch.float32)
        self._ahead: tuple[int, Future] | None = None       # (position in order, the read in flight)
        self._position = {(info.name, first): k for k, (info, first, _, _) in enumerate(order)}

    def read(self, info, first: int, rows: int, per_row: int) -> torch.Tensor:
        k = self._position.get((info.name, first))
        if self._ahead is not None and self._ahead[0] == k:
            raw = self._ahead[1].result()
        else:
            self._wait()
            raw = self._read_raw(info, first, rows, per_row)
        self._ahead = None
        n = rows * per_row
        if self._f32.numel() < n:
            self._f32 = torch.empty(0, dtype=torch.float32)           # let the small one go first
            self._f32 = torch.empty(n, dtype=torch.float32)
        block = self._f32[:n].view(rows, per_row)
        block.copy_(raw.view(SAFETENSORS_DTYPES[info.dtype]).view(rows, per_row))
        if k is not None and k + 1 < len(self.order):                # the raw buffer is free again: read on
            self._ahead = (k + 1, self._pool.submit(self._read_raw, *self.order[k + 1]))
        return block

    def _read_raw(self, info, first: int, rows: int, per_row: int) -> torch.Tensor:
        width = torch.empty((), dtype=SAFETENSORS_DTYPES[info.dtype]).element_size()
        nbytes, row_bytes = rows * per_row * width, per_row * width
        if self._raw.numel() < nbytes:
            self._raw = torch.empty(0, dtype=torch.uint8)
            self._raw = torch.empty(nbytes, dtype=torch.uint8)
        return read_range(self.files.fd(info.file), info.offset + first * row_bytes, nbytes, info.file,
                          f"tensor {info.name!r}", True, self._raw)

    def _wait(self) -> None:
        if self._ahead is not None:
            self._ahead[1].exception()            # a read in flight finishes before its buffer is reused
            self._ahead = None

    def close(self) -> None:
        self._wait()
        self._pool.shutdown(wait=True)
        self.files.close()
