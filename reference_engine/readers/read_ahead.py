"""Read what comes next on a thread while the caller computes on what it has: the one read-ahead of the engine
(the streaming core's next decoder layer) and of the checks (the weight scan's next row block).

Both alternate reading bytes (disk: ~0.7 GB/s on the reference machine) with computing on them (a layer's cast,
projections and attention; a block's norms). Done one after the other, they cost the sum of both; with the next
read on a thread during this compute, about the larger of the two. Python threads overlap here because both
sides run outside the GIL: `os.preadv` releases it for the read, torch's kernels for the compute.

Each read goes into a buffer kept for its slot (the k-th tensor of a layer reuses the k-th buffer: the layers of
a model have the same tensors; the scan reads one block at a time into slot 0), and the caller takes the result
by its key. A taken tensor is a view of its slot's buffer, which the next read queued for that slot overwrites:
the caller queues the next reads only once it has copied (cast) what it took. No fresh allocation per read: a
fresh mapping of a layer's size is page-faulted in (the kernel zeroes it) every time, which cost more than the
cast itself.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor

import torch


class ReadAhead:
    def __init__(self, name: str = "llmdoctor-read-ahead"):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._pending: dict[Hashable, Future] = {}
        self._buffers: list[torch.Tensor] = []  # uint8, one per slot

    def buffer(self, slot: int, nbytes: int) -> torch.Tensor:
        """Slot's uint8 buffer, at least nbytes (grown when smaller). No read queued for the slot may be in flight."""
        while slot >= len(self._buffers):
            self._buffers.append(torch.empty(0, dtype=torch.uint8))
        if self._buffers[slot].numel() < nbytes:
            self._buffers[slot] = torch.empty(0, dtype=torch.uint8)      # let the small one go first
            self._buffers[slot] = torch.empty(nbytes, dtype=torch.uint8)
        return self._buffers[slot]

    def queue(self, key: Hashable, read: Callable[[torch.Tensor], torch.Tensor], slot: int, nbytes: int) -> None:
        """Run read(buffer) on the thread (buffer: the slot's, at least nbytes); its result is taken by key."""
        self._pending[key] = self._pool.submit(read, self.buffer(slot, nbytes))

    def then(self, task: Callable[[], object]) -> None:
        """Run task on the thread once the reads queued before it are done (e.g. drop the files' page cache)."""
        self._pool.submit(task)

    def queued(self, key: Hashable) -> bool:
        return key in self._pending

    def take(self, key: Hashable) -> torch.Tensor | None:
        """The result read ahead under this key (waiting for its read; its error raised here), or None when none
        was queued."""
        future = self._pending.pop(key, None)
        return None if future is None else future.result()

    def clear(self) -> None:
        """Forget what was queued and not taken (a pass that ended early, a block asked for out of order): waits
        for reads in flight, so their buffers are free to reuse, or go now and not with a later pass."""
        pending, self._pending = list(self._pending.values()), {}
        for future in pending:
            future.cancel()
        for future in pending:
            if not future.cancelled():
                future.exception()

    def close(self) -> None:
        self.clear()
        self._pool.shutdown(wait=True)
