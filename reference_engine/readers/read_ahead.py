"""Read the next decoder layer on a thread while this one computes.

A streaming pass alternates reading a layer (disk: ~0.7 GB/s on the reference machine) with computing on it
(cast, projections, attention). Done one after the other, a pass costs the sum of both; with the next layer's
bytes read on a thread during this layer's compute it costs about the larger of the two. Python threads
overlap here because both sides run outside the GIL: `os.preadv` releases it for the read, torch's kernels
for the compute.

The thread reads each tensor in its file dtype (ChunkedWeights.raw: the same bytes a plain read gets, the pages
dropped after) into a buffer kept from the layer before (the k-th tensor of a layer reuses the k-th buffer: the
layers of a model have the same tensors), and the engine takes them by name (`take`) and casts them into its
own buffers (model_weights.fill). A taken tensor is a view of a buffer that the next layer's reads overwrite,
so the next layer is queued only once this one is cast. No fresh allocation per layer: a fresh mapping of a
layer's size is page-faulted in (the kernel zeroes it) every time, which cost more than the cast itself.
After the layer's last tensor the thread drops the files' page cache, as the streaming core does after each
layer when it reads itself.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch


class ReadAhead:
    def __init__(self, reader):
        self.reader = reader                    # layer_reader.ChunkedWeights (info, raw, drop_all)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="llmdoctor-read-ahead")
        self._pending: dict[str, Future] = {}
        self._buffers: list[torch.Tensor] = []  # uint8, one per tensor position in a layer

    def start(self, names: list[str]) -> None:
        """Queue the reads of one layer's tensors, in order, then a drop of the files' page cache. The tensors
        taken from the layer before must be copied by now: their buffers are read into again."""
        for k, name in enumerate(names):
            nbytes = self.reader.info(name).nbytes
            if k == len(self._buffers):
                self._buffers.append(torch.empty(0, dtype=torch.uint8))
            if self._buffers[k].numel() < nbytes:
                self._buffers[k] = torch.empty(0, dtype=torch.uint8)      # let the small one go first
                self._buffers[k] = torch.empty(nbytes, dtype=torch.uint8)
            self._pending[name] = self._pool.submit(self.reader.raw, name, self._buffers[k])
        self._pool.submit(self.reader.drop_all)

    def queued(self, name: str) -> bool:
        return name in self._pending

    def take(self, name: str) -> torch.Tensor | None:
        """The tensor read ahead under this name (waiting for its read), or None when none was queued."""
        future = self._pending.pop(name, None)
        return None if future is None else future.result()

    def clear(self) -> None:
        """Forget what was queued and not taken (a pass that ended early): waits for reads in flight, so their
        buffers go now, not with a later pass."""
        pending, self._pending = list(self._pending.values()), {}
        for future in pending:
            future.cancel()
        for future in pending:
            if not future.cancelled():
                future.exception()

    def close(self) -> None:
        self.clear()
        self._pool.shutdown(wait=True)
