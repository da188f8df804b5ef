"""Read tensors from the validated safetensors byte ranges in chunks, and let the page cache go after.

The streaming core (streaming.py) reads each decoder layer once per pass and drops it; the embedding and LM
head are read in row blocks. Reading with plain file reads at the offsets the header validator checked
(reference_engine.files.safetensors_io) keeps the footprint at exactly the tensors being used: a memory map
would leave every touched page charged to the process (and to a cgroup memory cap) until the kernel reclaims
it. After a read the pages are dropped from the page cache (posix_fadvise DONTNEED): a model that does not
fit the memory budget would not stay cached anyway, and keeping it would count against the budget.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from reference_engine.errors import ModelDirError
from reference_engine.files.weights import TensorInfo, Weights

FILE_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
READ_CHUNK = 64 << 20


class ChunkedWeights:
    """The `Weights` interface `load_layer_weights` uses (`in`, `get`, `info`), reading with pread.
    `bytes_read` counts every byte read, for the plan and the progress bar."""

    def __init__(self, weights: Weights, drop_cache: bool = True):
        self.weights = weights
        self.drop_cache = drop_cache
        self.bytes_read = 0
        self._fds: dict[Path, int] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.weights

    def info(self, name: str) -> TensorInfo:
        return self.weights.info(name)

    def get(self, name: str) -> torch.Tensor:
        """The whole tensor in its file dtype (a fresh CPU tensor, no memory map behind it)."""
        info = self.weights.info(name)
        return self._read(info, info.offset, info.nbytes).view(info.shape)

    def rows(self, name: str, start: int, end: int) -> torch.Tensor:
        """Rows start..end-1 of a 2-D tensor, [end - start, cols] in its file dtype."""
        info = self.weights.info(name)
        row_bytes = info.nbytes // info.shape[0]
        out = self._read(info, info.offset + start * row_bytes, (end - start) * row_bytes)
        return out.view(end - start, *info.shape[1:])

    def gather_rows(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` (any order, repeats allowed) [len(ids), cols]: each distinct row is read once."""
        unique, inverse = torch.unique(ids.cpu(), return_inverse=True)
        rows = torch.cat([self.rows(name, int(i), int(i) + 1) for i in unique])
        return rows[inverse]

    def _read(self, info: TensorInfo, offset: int, nbytes: int) -> torch.Tensor:
        dtype = FILE_DTYPES.get(info.dtype)
        if dtype is None:
            raise ModelDirError(info.file, f"tensor {info.name!r}: dtype {info.dtype} cannot be streamed")
        return self._read_bytes(info, offset, nbytes).view(dtype)

    def _read_bytes(self, info: TensorInfo, offset: int, nbytes: int) -> torch.Tensor:
        """nbytes at offset of info.file as a fresh uint8 tensor, then the pages are let go."""
        buf = torch.empty(nbytes, dtype=torch.uint8)
        view = memoryview((ctypes.c_char * nbytes).from_address(buf.data_ptr())).cast("B") if nbytes else b""
        fd = self._fd(info.file)
        done = 0
        try:
            while done < nbytes:
                got = os.preadv(fd, [view[done:done + READ_CHUNK]], offset + done)
                if got <= 0:
                    raise OSError("file ended early")
                done += got
        except OSError as e:
            raise ModelDirError(info.file, f"tensor {info.name!r}: cannot read: {e}") from None
        if self.drop_cache and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)
        self.bytes_read += nbytes
        return buf

    def _fd(self, file: Path) -> int:
        if file not in self._fds:
            self._fds[file] = os.open(file, os.O_RDONLY)
        return self._fds[file]

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
