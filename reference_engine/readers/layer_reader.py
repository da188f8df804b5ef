"""Read tensors from the validated safetensors byte ranges in chunks, and let the page cache go after.

The streaming core (streaming.py) reads each decoder layer once per pass and drops it; the embedding and LM
head are read in row blocks; the resident loader reads every tensor once through it. Reads are plain reads at
the offsets the header validator checked (files/reads.py), and the pages are dropped from the page cache
after them: a memory map would leave every touched page charged to the process (and to a cgroup memory cap)
beside the copy the engine holds; a model that does not fit would not stay cached anyway.
"""
from __future__ import annotations

from functools import partial

import torch

from reference_engine.errors import ModelDirError
from reference_engine.files.reads import SAFETENSORS_DTYPES, FileHandles, drop_cached, read_range
from reference_engine.files.weights import TensorInfo, Weights

# the float dtypes a layer can be streamed from (cast to the run's dtype after the read)
FILE_DTYPES = {name: SAFETENSORS_DTYPES[name] for name in ("F32", "BF16", "F16", "F64")}


class ChunkedWeights:
    """The `Weights` interface `load_layer_weights` uses (`in`, `get`, `info`), reading with pread.
    `bytes_read` counts every byte read, for the plan and the progress bar."""
    read_ahead = True            # `get` may be served by a ReadAhead (a subclass that computes its tensors: no)

    def __init__(self, weights: Weights, drop_cache: bool = True):
        self.weights = weights
        self.drop_cache = drop_cache
        self.bytes_read = 0
        self.ahead = None            # read_ahead.ReadAhead, set by the streaming core (keys: tensor names)
        self._files = FileHandles()

    def __contains__(self, name: str) -> bool:
        return name in self.weights

    def info(self, name: str) -> TensorInfo:
        return self.weights.info(name)

    def get(self, name: str) -> torch.Tensor:
        """The whole tensor in its file dtype (a fresh CPU tensor, no memory map behind it); read on the
        read-ahead thread when it was queued there (read_ahead.py)."""
        ahead = self.ahead.take(name) if self.ahead is not None else None
        return ahead if ahead is not None else self.raw(name)

    def raw(self, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
        """`get` without the read-ahead: read the tensor now (into `out`, a uint8 buffer large enough, when
        given: the result is a view of it)."""
        info = self.weights.info(name)
        return self._read(info, info.offset, info.nbytes, out).view(info.shape)

    def queue(self, names: list[str]) -> None:
        """Queue the reads of one layer's tensors on self.ahead, in order (the k-th into slot k), then a drop of
        the files' page cache. The tensors taken from the layer before must be copied by now: their buffers are
        read into again."""
        for k, name in enumerate(names):
            self.ahead.queue(name, partial(self.raw, name), k, self.weights.info(name).nbytes)
        self.ahead.then(self.drop_all)

    def raw_rows(self, info: TensorInfo, start: int, end: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """The bytes of leading rows start..end-1 of a tensor of any dtype, uint8 (into `out` when given: the
        result is a view of it); what a reader that reduces every value (the weight scan) converts itself."""
        row_bytes = info.nbytes // info.shape[0] if info.shape else info.nbytes
        return self._read_bytes(info, info.offset + start * row_bytes, (end - start) * row_bytes, out)

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
        self.drop_tensor(name)
        return rows[inverse]

    def drop_all(self) -> None:
        """Let go of every cached page of the files read so far: the kernel's readahead past a tensor's end
        caches pages of the next one, which may have been read (and dropped) already; called after each layer
        of a pass, so a pass never leaves more than one layer's readahead behind."""
        if self.drop_cache:
            for fd in self._files.open_fds():
                drop_cached(fd, 0, 0)

    def drop_tensor(self, name: str) -> None:
        """Let go of every cached page of a tensor: a row is smaller than a page, and each read of one pulls
        in a readahead window, so dropping only the rows' bytes would leave most of what was read cached."""
        if self.drop_cache:
            info = self.weights.info(name)
            drop_cached(self._files.fd(info.file), info.offset, info.nbytes)

    def _read(self, info: TensorInfo, offset: int, nbytes: int, out: torch.Tensor | None = None) -> torch.Tensor:
        dtype = FILE_DTYPES.get(info.dtype)
        if dtype is None:
            raise ModelDirError(info.file, f"tensor {info.name!r}: dtype {info.dtype} cannot be streamed")
        return self._read_bytes(info, offset, nbytes, out).view(dtype)

    def _read_bytes(self, info: TensorInfo, offset: int, nbytes: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """nbytes at offset of info.file as a fresh uint8 tensor (or into `out`), then the pages are let go."""
        buf = read_range(self._files.fd(info.file), offset, nbytes, info.file, f"tensor {info.name!r}",
                         self.drop_cache, out)
        self.bytes_read += nbytes
        return buf

    def close(self) -> None:
        self._files.close()
