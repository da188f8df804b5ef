"""Paged KV cache and block allocator: invariants under random allocate/append/fork/free/truncate/compact
interleavings (hypothesis), content integrity through copy-on-write and compaction, statistics."""
from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from reference_engine.block_allocator import BlockAllocator, CacheFullError
from reference_engine.kv_cache import PagedKVCache

EXAMPLES, OPS_PER_EXAMPLE = 100, 1000   # 10^5 operations in all


def _cache(num_blocks: int, block_size: int) -> PagedKVCache:
    return PagedKVCache(num_layers=1, num_blocks=num_blocks, block_size=block_size, num_kv_heads=1, head_dim=1)


def _write(cache: PagedKVCache, slots: torch.Tensor, values: list[int]) -> None:
    v = torch.tensor(values, dtype=torch.float32).view(-1, 1, 1)
    cache.write(0, slots, v, -v)


def _read(cache: PagedKVCache, seq) -> list[int]:
    slots = cache.slots(seq, 0, cache.length(seq))
    k, v = cache.flat_k(0)[slots].view(-1), cache.flat_v(0)[slots].view(-1)
    assert torch.equal(k, -v)
    return k.long().tolist()


class Model:
    """The reference: each live sequence is just a list of token values."""

    def __init__(self, cache: PagedKVCache, rnd: random.Random):
        self.cache, self.rnd, self.seqs, self.next_id, self.next_value = cache, rnd, {}, 0, 1

    def new_values(self, n: int) -> list[int]:
        values = list(range(self.next_value, self.next_value + n))
        self.next_value += n
        return values

    def step(self) -> None:
        op = self.rnd.choice(["allocate", "append", "append", "append", "fork", "free", "truncate", "compact"])
        live = list(self.seqs)
        if op == "allocate" or not live:
            self.allocate()
        elif op == "append":
            self.append(self.rnd.choice(live), self.rnd.choice([1, 1, 1, 2, 5, 17]))
        elif op == "fork":
            self.fork(self.rnd.choice(live))
        elif op == "free":
            seq = self.rnd.choice(live)
            self.cache.free(seq)
            del self.seqs[seq]
        elif op == "truncate":
            seq = self.rnd.choice(live)
            keep = self.rnd.randint(0, len(self.seqs[seq]))
            self.cache.truncate(seq, keep)
            del self.seqs[seq][keep:]
        else:
            self.cache.compact()
            stats = self.cache.stats()
            assert stats.pool_span == stats.used_blocks

    def allocate(self) -> None:
        n, seq = self.rnd.randint(0, 40), self.next_id
        if not self.cache.can_allocate(n):
            with pytest.raises(CacheFullError):
                self.cache.allocate(seq, n)
            return
        self.next_id += 1
        values = self.new_values(n)
        _write(self.cache, self.cache.allocate(seq, n), values)
        self.seqs[seq] = values

    def append(self, seq, n: int) -> None:
        before = (self.cache.length(seq), self.cache.block_table(seq), self.cache.allocator.num_free)
        if not self.cache.can_append(seq, n):
            with pytest.raises(CacheFullError):
                self.cache.append(seq, n)
            assert (self.cache.length(seq), self.cache.block_table(seq), self.cache.allocator.num_free) == before
            return
        values = self.new_values(n)
        _write(self.cache, self.cache.append(seq, n), values)
        self.seqs[seq] += values

    def fork(self, parent) -> None:
        child, self.next_id = self.next_id, self.next_id + 1
        self.cache.fork(parent, child)
        self.seqs[child] = list(self.seqs[parent])

    def check(self, contents: bool) -> None:
        assert self.cache.validate() == []
        alloc = self.cache.allocator
        assert alloc.num_free + alloc.num_used == alloc.num_blocks
        if contents:
            for seq, values in self.seqs.items():
                assert self.cache.length(seq) == len(values)
                assert _read(self.cache, seq) == values


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(num_blocks=st.integers(1, 48), block_size=st.sampled_from([1, 2, 3, 4, 16]), seed=st.integers(0, 2**32))
def test_random_interleavings_keep_invariants_and_contents(num_blocks, block_size, seed):
    # the operation stream comes from a seeded PRNG: drawing 10^5 choices through hypothesis is far slower
    cache = _cache(num_blocks, block_size)
    model = Model(cache, random.Random(seed))
    for i in range(OPS_PER_EXAMPLE):
        model.step()
        model.check(contents=i % 50 == 0)
    model.check(contents=True)
    for seq in list(model.seqs):
        cache.free(seq)
    assert cache.allocator.num_free == num_blocks and cache.validate() == []
    assert all(c == 0 for c in cache.allocator.ref_counts)


def test_fork_shares_blocks_and_copies_on_write():
    cache = _cache(8, 4)
    _write(cache, cache.allocate("a", 6), [1, 2, 3, 4, 5, 6])
    cache.fork("a", "b")
    assert cache.block_table("a") == cache.block_table("b") and cache.stats().shared_blocks == 2
    assert cache.blocks_needed("b", 1) == 1            # the shared half-full block must be copied
    _write(cache, cache.append("b", 1), [70])
    _write(cache, cache.append("a", 1), [7])
    assert cache.block_table("a")[0] == cache.block_table("b")[0]       # the full block stays shared
    assert cache.block_table("a")[1] != cache.block_table("b")[1]
    assert _read(cache, "a") == [1, 2, 3, 4, 5, 6, 7] and _read(cache, "b") == [1, 2, 3, 4, 5, 6, 70]
    assert cache.validate() == []


def test_stats_report_fragmentation_scatter_and_bytes():
    cache = PagedKVCache(num_layers=2, num_blocks=10, block_size=4, num_kv_heads=3, head_dim=8)
    cache.allocate("x", 5)          # blocks 0, 1 (3 unused slots)
    cache.allocate("y", 4)          # block 2
    cache.append("x", 4)            # block 3: x = [0, 1, 3], 9 tokens
    stats = cache.stats()
    assert (stats.total_blocks, stats.used_blocks, stats.free_blocks) == (10, 4, 6)
    assert stats.per_sequence_blocks == {"x": 3, "y": 1}
    assert stats.internal_fragmentation == 3 and stats.fragmentation_ratio == 3 / 16
    assert stats.scatter == {"x": 0.5, "y": 0.0}
    assert stats.bytes_per_token == 2 * 2 * 3 * 8 * 4 and stats.bytes_in_use == 4 * 4 * stats.bytes_per_token
    cache.free("y")
    mapping = cache.compact()
    assert cache.block_table("x") == [0, 1, 2] and mapping[3] == 2
    assert cache.stats().scatter == {"x": 0.0} and cache.stats().pool_span == 3


def test_allocator_refuses_double_free_and_full_pool():
    alloc = BlockAllocator(2)
    a, b = alloc.allocate(), alloc.allocate()
    assert (a, b) == (0, 1)
    with pytest.raises(CacheFullError):
        alloc.allocate()
    alloc.decref(a)
    with pytest.raises(ValueError, match="double free"):
        alloc.decref(a)
    with pytest.raises(ValueError):
        alloc.incref(a)
    assert alloc.validate() == []


def test_validate_reports_a_corrupted_table():
    cache = _cache(4, 2)
    cache.allocate("s", 3)
    cache.tables["s"].append(3)                    # a block nobody counted
    problems = cache.validate()
    assert any("holds 3 blocks for 3 tokens" in p for p in problems)
    assert any("disagree" in p for p in problems)
