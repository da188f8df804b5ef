"""Paged KV cache: per-layer pools of fixed-size blocks, per-sequence block tables, copy-on-write forks.

A sequence's token at position p lives in slot `table[p // block_size] * block_size + p % block_size` of
the flattened pool [num_blocks * block_size, num_kv_heads, head_dim]. Memory in use is exactly the blocks
in use; a freed block returns to the allocator's free list. Forks share blocks by reference count and copy a
shared block only when one of its owners writes into it (copy-on-write).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import chain

import torch

from reference_engine.core.cache.block_allocator import BlockAllocator, CacheFullError
from reference_engine.core.cache.layout import LayerCache, bytes_per_token, dense_layout, is_hybrid, kv_part
from reference_engine.core.cache.prefix_cache import ROOT_HASH, PrefixCache
from reference_engine.core.cache.state_cache import StateCache
from reference_engine.limits import release_pages

__all__ = ["PagedKVCache", "CacheStats", "CacheFullError", "BlockAllocator"]


@dataclass
class CacheStats:
    total_blocks: int
    used_blocks: int
    free_blocks: int
    shared_blocks: int                      # blocks referenced by more than one sequence
    block_size: int
    bytes_per_block: int                    # K and V of all layers
    bytes_per_token: int
    bytes_in_use: int                       # used_blocks * bytes_per_block
    tokens: int                             # sum of sequence lengths (shared tokens counted once per owner)
    per_sequence_blocks: dict = field(default_factory=dict)
    internal_fragmentation: int = 0         # unused slots in partially filled blocks
    fragmentation_ratio: float = 0.0        # internal_fragmentation / slots in used blocks
    scatter: dict = field(default_factory=dict)   # seq -> breaks in its block run / (blocks - 1)
    pool_span: int = 0                      # highest used block id + 1 (compaction makes it == used_blocks)
    prefix_cached_blocks: int = 0           # full blocks findable by prefix hash (live or on the free list)


class PagedKVCache:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype=torch.float32, device="cpu", prefix_caching: bool = False,
                 layout: list[LayerCache] | None = None):
        """layout (cache/layout.py): what each layer keeps; None = K and V of num_kv_heads x head_dim on every
        layer. A recurrent layer (StateLayout) gets no pool here: its state lives in `self.states`."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, found {block_size}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        self.layout = layout if layout is not None else dense_layout(num_layers, num_kv_heads, head_dim)
        self.allocator = BlockAllocator(num_blocks)
        # uninitialised on purpose: pages are only touched when written, and no unwritten slot is ever read
        self.k_pools = [self._pool(c, "k", dtype, device) for c in self.layout]
        self.v_pools = [self._pool(c, "v", dtype, device) for c in self.layout]
        self.states = StateCache(self.layout, device) if is_hybrid(self.layout) else None
        if prefix_caching and self.states is not None:
            raise ValueError("prefix caching is not available for a model with recurrent layers: their state "
                             "summarises the whole prefix and cannot be shared block by block")
        self.tables: dict = {}    # seq_id -> list of block ids
        self.lengths: dict = {}   # seq_id -> tokens held
        # token ids and chained block hashes per sequence (None: tokens unknown, never shared): prefix caching
        # matches them, and an engine whose RoPE factors change with the length recomputes from them
        self.prefix = PrefixCache(block_size) if prefix_caching else None
        self.keep_tokens = prefix_caching
        self.keep_until: int | None = None      # past this length a sequence's tokens are dropped (keep_tokens_until)
        self.token_ids: dict = {}
        self.block_hashes: dict = {}

    def _pool(self, c: LayerCache, which: str, dtype, device) -> torch.Tensor:
        """[num_blocks, block_size, heads, dim] for an attention layer; an empty tensor for a recurrent one."""
        c = kv_part(c)
        if c is None:
            return torch.empty(0, dtype=dtype, device=device)
        return torch.empty((self.num_blocks, self.block_size, c.heads, c.k_dim if which == "k" else c.v_dim),
                           dtype=dtype, device=device)

    def keep_tokens_until(self, length: int) -> None:
        """Remember each sequence's token ids while it holds at most `length` tokens (LongRoPE: a sequence
        crossing that length is recomputed from them). A longer sequence's blocks hold K/V rotated with the
        other factors, so they are never offered to the prefix cache either."""
        self.keep_tokens, self.keep_until = True, length

    # ---- queries -------------------------------------------------------------------------------------
    def __contains__(self, seq_id) -> bool:
        return seq_id in self.tables

    def sequences(self) -> list:
        return list(self.tables)

    def length(self, seq_id) -> int:
        return self.lengths[seq_id]

    def block_table(self, seq_id) -> list[int]:
        return list(self.tables[seq_id])

    def flat_k(self, layer: int) -> torch.Tensor:
        pool = self.k_pools[layer]
        return pool.view(pool.shape[0] * pool.shape[1], *pool.shape[2:])   # [slots, kv_heads, k_dim]

    def flat_v(self, layer: int) -> torch.Tensor:
        pool = self.v_pools[layer]
        return pool.view(pool.shape[0] * pool.shape[1], *pool.shape[2:])   # [slots, kv_heads, v_dim]

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, seq_id, num_new_tokens: int) -> int:
        """Free blocks that appending num_new_tokens needs, including a copy of a shared partial last block."""
        if seq_id is None or seq_id not in self.tables:
            return self.blocks_for(num_new_tokens)
        length, table = self.lengths[seq_id], self.tables[seq_id]
        needed = self.blocks_for(length + num_new_tokens) - len(table)
        if num_new_tokens > 0 and length % self.block_size and self.allocator.ref_count(table[-1]) > 1:
            needed += 1
        return needed

    def can_allocate(self, num_tokens: int) -> bool:
        return self.blocks_for(num_tokens) <= self.allocator.num_free

    def can_append(self, seq_id, num_tokens: int = 1) -> bool:
        return self.blocks_needed(seq_id, num_tokens) <= self.allocator.num_free

    # ---- mutations -----------------------------------------------------------------------------------
    def allocate(self, seq_id, num_tokens: int = 0, tokens: list[int] | None = None) -> torch.Tensor:
        """Start a new sequence and reserve its first num_tokens slots; returns their slot ids.
        `tokens` (the ids going into those slots) lets full blocks be registered for prefix caching."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} already has KV blocks")
        if not self.can_allocate(num_tokens):
            raise CacheFullError(f"sequence of {num_tokens} tokens needs {self.blocks_for(num_tokens)} blocks, "
                                 f"{self.allocator.num_free} free")
        self.tables[seq_id], self.lengths[seq_id] = [], 0
        self.token_ids[seq_id], self.block_hashes[seq_id] = ([] if self.keep_tokens else None), []
        if self.states is not None:
            self.states.allocate(seq_id)
        return self.append(seq_id, num_tokens, tokens)

    def allocate_prefix(self, seq_id, tokens: list[int]) -> int:
        """Start a new sequence on the cached blocks of its longest known prefix (whole blocks, always leaving
        at least the last token to compute). Returns how many tokens are already cached (0 without caching)."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} already has KV blocks")
        blocks = self.prefix.match(tokens, (len(tokens) - 1) // self.block_size) if self.prefix else []
        for block in blocks:
            if self.allocator.is_free(block):
                self.allocator.take(block)
            else:
                self.allocator.incref(block)
        length = len(blocks) * self.block_size
        self.tables[seq_id], self.lengths[seq_id] = blocks, length
        self.token_ids[seq_id] = list(tokens[:length])
        self.block_hashes[seq_id] = [self.prefix.by_block[b].key for b in blocks]
        return length

    def append(self, seq_id, num_tokens: int = 1, tokens: list[int] | None = None) -> torch.Tensor:
        """Reserve the next num_tokens slots of a sequence (copying a shared last block first)."""
        needed = self.blocks_needed(seq_id, num_tokens)
        if needed > self.allocator.num_free:
            raise CacheFullError(f"sequence {seq_id!r} needs {needed} more blocks, "
                                 f"{self.allocator.num_free} free")
        table, start = self.tables[seq_id], self.lengths[seq_id]
        if num_tokens > 0 and start % self.block_size and self.allocator.ref_count(table[-1]) > 1:
            table[-1] = self._copy_block(table[-1])
        while len(table) < self.blocks_for(start + num_tokens):
            table.append(self._new_block())
        self.lengths[seq_id] = start + num_tokens
        if self.keep_tokens:
            self._record_tokens(seq_id, tokens, num_tokens)
        return self.slots(seq_id, start, start + num_tokens)

    def _record_tokens(self, seq_id, tokens: list[int] | None, num_tokens: int) -> None:
        known = self.token_ids.get(seq_id)
        past = self.keep_until is not None and self.lengths[seq_id] > self.keep_until
        if known is None or tokens is None or len(tokens) != num_tokens or past:
            self.token_ids[seq_id] = None      # contents unknown from here on: never offered as a prefix
            return
        known.extend(tokens)
        if self.prefix is None:
            return
        hashes, table, bs = self.block_hashes[seq_id], self.tables[seq_id], self.block_size
        while len(hashes) < len(known) // bs:
            i = len(hashes)
            parent = hashes[-1] if hashes else ROOT_HASH
            hashes.append(self.prefix.register(table[i], parent, tuple(known[i * bs:(i + 1) * bs])))

    def _new_block(self) -> int:
        block = self.allocator.allocate()
        if self.prefix is not None:
            self.prefix.forget(block)          # its cached contents are about to be overwritten
        return block

    def _copy_block(self, block: int) -> int:
        new = self._new_block()
        for pools in (self.k_pools, self.v_pools):
            for pool in pools:
                if pool.numel():
                    pool[new].copy_(pool[block])
        self.allocator.decref(block)
        return new

    def fork(self, parent_id, child_id) -> None:
        """The child shares every block of the parent; either copies a shared block before writing to it."""
        if child_id in self.tables:
            raise ValueError(f"sequence {child_id!r} already has KV blocks")
        table = self.tables[parent_id]
        for block in table:
            self.allocator.incref(block)
        self.tables[child_id], self.lengths[child_id] = list(table), self.lengths[parent_id]
        known = self.token_ids.get(parent_id)
        self.token_ids[child_id] = None if known is None else list(known)
        self.block_hashes[child_id] = list(self.block_hashes.get(parent_id, []))
        if self.states is not None:
            self.states.fork(parent_id, child_id)      # a beam continues from its own copy of the state

    def truncate(self, seq_id, length: int) -> None:
        """Forget tokens from `length` on (rollback of a failed step, speculative decoding)."""
        if not 0 <= length <= self.lengths[seq_id]:
            raise ValueError(f"cannot truncate sequence {seq_id!r} of {self.lengths[seq_id]} tokens to {length}")
        if self.states is not None and 0 < length < self.lengths[seq_id]:
            raise ValueError(f"cannot truncate sequence {seq_id!r} to {length} tokens: its recurrent state "
                             "summarises all of them and has no checkpoint there")
        if self.states is not None and length == 0:
            self.states.reset(seq_id)
        table = self.tables[seq_id]
        while len(table) > self.blocks_for(length):
            block = table.pop()
            if self.prefix is not None:
                self.prefix.forget(block)      # it may hold tokens of a step that never completed
            self.allocator.decref(block)
        if self.prefix is not None:
            if length % self.block_size:
                self.prefix.forget(table[-1])  # partially kept: later appends write into it
            del self.block_hashes[seq_id][length // self.block_size:]
        if self.token_ids.get(seq_id) is not None:
            del self.token_ids[seq_id][length:]
        self.lengths[seq_id] = length

    def swap(self, a, b) -> None:
        """Exchange everything two sequences hold (blocks, lengths, tokens): a recomputed copy built under a
        private id takes the place of the original, whose old blocks the private id then frees."""
        for table in (self.tables, self.lengths, self.token_ids, self.block_hashes):
            table[a], table[b] = table[b], table[a]
        if self.states is not None:
            self.states.swap(a, b)

    def release_pages(self) -> None:
        """With no sequence held (and no prefix cache to keep), give the pools' pages back to the OS: a run
        that has written many tokens once (the far-position check) does not keep them resident after. The
        next writes fault in fresh pages; no slot that will be read is lost."""
        if self.tables or self.prefix is not None:
            return
        for pool in self.k_pools + self.v_pools:
            if pool.device.type == "cpu" and pool.numel():
                release_pages(pool)

    def free(self, seq_id) -> None:
        for block in self.tables.pop(seq_id):
            self.allocator.decref(block)   # a registered block stays findable on the free list until reused
        if self.states is not None:
            self.states.free(seq_id)
        del self.lengths[seq_id]
        self.token_ids.pop(seq_id, None)
        self.block_hashes.pop(seq_id, None)

    def slots(self, seq_id, start: int, end: int) -> torch.Tensor:
        """Slot ids [end - start] of positions start..end-1 (int64, CPU)."""
        table = torch.tensor(self.tables[seq_id], dtype=torch.int64)
        positions = torch.arange(start, end, dtype=torch.int64)
        return table[positions // self.block_size] * self.block_size + positions % self.block_size

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v [num_tokens, kv_heads, head_dim] into the given slots."""
        self.flat_k(layer).index_copy_(0, slots, k)
        self.flat_v(layer).index_copy_(0, slots, v)

    # ---- maintenance ---------------------------------------------------------------------------------
    def compact(self) -> dict[int, int]:
        """Move live blocks to a dense prefix of the pool, each sequence's blocks in table order, and rewrite
        the block tables. Returns old -> new block ids. The cached values (hence logits) do not change."""
        order: list[int] = []
        seen: set[int] = set()
        for table in self.tables.values():
            for block in table:
                if block not in seen:
                    seen.add(block)
                    order.append(block)
        mapping = {old: new for new, old in enumerate(order)}
        if all(old == new for old, new in mapping.items()):
            return mapping
        device = self.k_pools[0].device
        old_ids = torch.tensor(order, dtype=torch.int64, device=device)
        new_ids = torch.arange(len(order), dtype=torch.int64, device=device)
        for pools in (self.k_pools, self.v_pools):
            for pool in pools:
                if pool.numel():
                    pool[new_ids] = pool[old_ids]  # the right side is gathered into a copy first: overlap is safe
        counts = [0] * self.num_blocks
        for old, new in mapping.items():
            counts[new] = self.allocator.ref_count(old)
        self.allocator.reset_to(counts)
        for seq_id, table in self.tables.items():
            self.tables[seq_id] = [mapping[b] for b in table]
        if self.prefix is not None:
            self.prefix.remap(mapping)
        return mapping

    def stats(self) -> CacheStats:
        bs = self.block_size
        fill: dict[int, int] = {}   # block -> most slots any owner uses in it
        for seq_id, table in self.tables.items():
            length = self.lengths[seq_id]
            for i, block in enumerate(table):
                fill[block] = max(fill.get(block, 0), min(bs, length - i * bs))
        used = self.allocator.num_used
        unused_slots = sum(bs - f for f in fill.values())
        per_block = bs * bytes_per_token(self.layout, self.k_pools[0].dtype)
        return CacheStats(
            total_blocks=self.num_blocks, used_blocks=used, free_blocks=self.allocator.num_free,
            shared_blocks=sum(1 for c in self.allocator.ref_counts if c > 1), block_size=bs,
            bytes_per_block=per_block, bytes_per_token=per_block // bs, bytes_in_use=used * per_block,
            tokens=sum(self.lengths.values()),
            per_sequence_blocks={s: len(t) for s, t in self.tables.items()},
            internal_fragmentation=unused_slots,
            fragmentation_ratio=unused_slots / (used * bs) if used else 0.0,
            scatter={s: _scatter(t) for s, t in self.tables.items()},
            pool_span=max(fill) + 1 if fill else 0,
            prefix_cached_blocks=len(self.prefix) if self.prefix is not None else 0,
        )

    def validate(self) -> list[str]:
        """Allocator and block-table invariants; never raises."""
        try:
            problems = self.allocator.validate()
            refs = Counter(chain.from_iterable(self.tables.values()))
            for seq_id, table in self.tables.items():
                if len(table) != self.blocks_for(self.lengths[seq_id]):
                    problems.append(f"sequence {seq_id!r} holds {len(table)} blocks for "
                                    f"{self.lengths[seq_id]} tokens (expected {self.blocks_for(self.lengths[seq_id])})")
                if len(set(table)) != len(table):
                    problems.append(f"sequence {seq_id!r} lists a block twice in its table")
            outside = [b for b in refs if not 0 <= b < self.num_blocks]
            if outside:
                problems.append(f"block tables point at blocks {outside[:5]} outside the pool")
            counts = self.allocator.ref_counts
            wrong = [b for b, c in enumerate(counts) if c != refs.get(b, 0)]
            if wrong:
                b = wrong[0]
                problems.append(f"{len(wrong)} blocks have reference counts that disagree with the block tables "
                                f"(block {b}: count {counts[b]}, in {refs.get(b, 0)} tables)")
            if self.prefix is not None:
                problems += self.prefix.validate(counts)
            if self.states is not None:
                problems += self.states.validate(set(self.tables))
            return problems
        except Exception as e:  # validate never raises
            return [f"KV cache validation failed: {type(e).__name__}: {e}"]


def _scatter(table: list[int]) -> float:
    """0.0 when a sequence's blocks are one contiguous ascending run, 1.0 when no two are adjacent."""
    if len(table) < 2:
        return 0.0
    breaks = sum(1 for a, b in zip(table, table[1:]) if b != a + 1)
    return breaks / (len(table) - 1)
