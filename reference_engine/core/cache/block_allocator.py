"""Block allocator of the paged KV cache: an O(1) free list plus a reference count per block.

Pure bookkeeping, no tensors, so its invariants can be property-tested on their own. A block with a
reference count above one is shared (a forked beam or a common prefix) and must be copied before a write.
The free list is an OrderedDict used as an ordered set: allocation takes the block freed longest
ago (a fresh pool hands out 0, 1, 2, ..., contiguous runs; a freed block that still holds a cached prefix is
evicted last), and `take` revives one particular free block in O(1) (prefix-cache hits).
"""
from __future__ import annotations

from collections import OrderedDict


class CacheFullError(RuntimeError):
    """Not enough free KV blocks for the request; the cache was left unchanged."""


class BlockAllocator:
    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, found {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_list: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_list)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free_list)

    def allocate(self) -> int:
        if not self.free_list:
            raise CacheFullError(f"all {self.num_blocks} KV blocks are in use")
        block, _ = self.free_list.popitem(last=False)
        self.ref_counts[block] = 1
        return block

    def take(self, block: int) -> None:
        """Allocate this particular free block (a cached prefix block being reused)."""
        del self.free_list[block]
        self.ref_counts[block] = 1

    def is_free(self, block: int) -> bool:
        return block in self.free_list

    def incref(self, block: int) -> None:
        if self.ref_counts[block] < 1:
            raise ValueError(f"block {block} is free; cannot share it")
        self.ref_counts[block] += 1

    def decref(self, block: int) -> bool:
        """Drop one reference; True when the block went back to the free list."""
        if self.ref_counts[block] < 1:
            raise ValueError(f"block {block} is already free (double free)")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self.free_list[block] = None
            return True
        return False

    def ref_count(self, block: int) -> int:
        return self.ref_counts[block]

    def reset_to(self, ref_counts: list[int]) -> None:
        """Replace all counts (after compaction); free blocks are those at zero, lowest id first."""
        self.ref_counts = list(ref_counts)
        self.free_list = OrderedDict.fromkeys(b for b in range(self.num_blocks) if ref_counts[b] == 0)

    def validate(self) -> list[str]:
        problems = []
        free = set(self.free_list)
        negative = [b for b, c in enumerate(self.ref_counts) if c < 0]
        if negative:
            problems.append(f"negative reference counts on blocks {negative[:5]}")
        zero = {b for b, c in enumerate(self.ref_counts) if c == 0}
        if zero != free:
            leaked, wrongly_free = sorted(zero - free), sorted(free - zero)
            if leaked:
                problems.append(f"blocks {leaked[:5]} have no references but are not on the free list (leak)")
            if wrongly_free:
                problems.append(f"blocks {wrongly_free[:5]} are on the free list but still referenced")
        return problems
