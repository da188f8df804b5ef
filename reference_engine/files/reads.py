"""Plain reads of validated byte ranges that leave no page cache behind.

Every weight llmdoctor reads is read once into a tensor it owns, at offsets the header validators checked
(safetensors_io.py, gguf_file.py). After the read the range is dropped from the page cache
(posix_fadvise DONTNEED): the model is then held once, in the engine or a check's working tensor, and not a
second time as cache charged to the process's cgroup — under a memory cap, that cache is what made a model
look twice its size (docs/memory.md). Reads go in chunks so a huge tensor never needs a huge bounce buffer.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from reference_engine.errors import ModelDirError

READ_CHUNK = 64 << 20
# safetensors dtype -> torch dtype (what a tensor's bytes are viewed as)
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn,
                      "F8_E5M2": torch.float8_e5m2, "C64": torch.complex64,
                      **{k: getattr(torch, v) for k, v in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
                                                           ("F8_E8M0", "float8_e8m0fnu")) if hasattr(torch, v)}}


def read_range(fd: int, offset: int, nbytes: int, file: Path, what: str, drop_cache: bool = True,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """nbytes at offset of the open file `fd` as a fresh uint8 CPU tensor (or into `out`, a contiguous uint8
    CPU tensor of at least nbytes: the first nbytes of it); ModelDirError naming `what`."""
    buf = torch.empty(nbytes, dtype=torch.uint8) if out is None else out[:nbytes]
    view = memoryview((ctypes.c_char * nbytes).from_address(buf.data_ptr())).cast("B") if nbytes else b""
    done = 0
    try:
        while done < nbytes:
            got = os.preadv(fd, [view[done:done + READ_CHUNK]], offset + done)
            if got <= 0:
                raise OSError("file ended early")
            done += got
    except OSError as e:
        raise ModelDirError(file, f"{what}: cannot read: {e}") from None
    if drop_cache:
        drop_cached(fd, offset, nbytes)
    return buf


def drop_cached(fd: int, offset: int, nbytes: int) -> None:
    """Let the page cache go for a byte range this process has finished reading (nbytes 0: to the end of the
    file; no-op where unsupported)."""
    if nbytes >= 0 and hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)


class FileHandles:
    """Read-only descriptors, one per file, opened on first use and closed with `close`."""

    def __init__(self):
        self._fds: dict[Path, int] = {}

    def fd(self, file: Path) -> int:
        if file not in self._fds:
            try:
                self._fds[file] = os.open(file, os.O_RDONLY)
            except OSError as e:
                raise ModelDirError(file, f"cannot open: {e.strerror or e}") from None
        return self._fds[file]

    def open_fds(self) -> list[int]:
        return list(self._fds.values())

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
