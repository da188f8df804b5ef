"""Paged KV cache and block allocator: invariants under random allocate/append/fork/free/truncate/compact
interleavings (hypothesis), content integrity through copy-on-write and compaction, statistics."""
from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings, strategies as st

from reference_engine.core.cache.block_allocator import BlockAllocator, CacheFullError
from reference_engine.core.cache.kv_cache import PagedKVCache

EXAMPLES, OPS_PER_EXAMPLE = 100, 1000   # 10^5 operations in all


def _cache(num_blocks: int, block_size: int, prefix_caching: bool = False) -> PagedKVCache:
    return PagedKVCache(num_layers=1, num_blocks=num_blocks, block_size=block_size, num_kv_heads=1, head_dim=1,
                        prefix_caching=prefix_caching)


def _write(cache: PagedKVCache, slots: torch.Tensor, values: list[int]) -> None:
    v = torch.tensor(values, dtype=torch.float32).view(-1, 1, 1)
    cache.write(0, slots, v, -v)


def _read(cache: PagedKVCache, seq) -> list[int]:
    slots = cache.slots(seq, 0, cache.length(seq))
    k, v = cache.flat_k(0)[slots].view(-1), cache.flat_v(0)[slots].view(-1)
    assert torch.equal(k, -v)
    return k.long().tolist()


def rolling(values: list[int], tokens: list[int]) -> list[int]:
    """Stand-in K/V contents: like real K/V, each position's value depends on the whole prefix."""
    out, v = [], values[-1] if values else 0
    for t in tokens:
        v = (v * 31 + t + 1) % 1_000_003        # exact in float32
        out.append(v)
    return out


class Model:
    """The reference: each live sequence is a list of tokens and the K/V values they imply. With
    prefix caching on, tokens come from a 2-letter alphabet so that prefixes repeat and blocks are reused."""

    def __init__(self, cache: PagedKVCache, rnd: random.Random):
        self.cache, self.rnd, self.next_id = cache, rnd, 0
        self.tokens, self.values, self.history = {}, {}, []
        self.alphabet = 2 if cache.prefix is not None else 10**6

    def new_tokens(self, n: int) -> list[int]:
        return [self.rnd.randrange(self.alphabet) for _ in range(n)]

    def step(self) -> None:
        op = self.rnd.choice(["allocate", "append", "append", "append", "fork", "free", "truncate", "compact"])
        live = list(self.tokens)
        if op == "allocate" or not live:
            self.allocate()
        elif op == "append":
            self.append(self.rnd.choice(live), self.rnd.choice([1, 1, 1, 2, 5, 17]))
        elif op == "fork":
            self.fork(self.rnd.choice(live))
        elif op == "free":
            seq = self.rnd.choice(live)
            self.cache.free(seq)
            del self.tokens[seq], self.values[seq]
        elif op == "truncate":
            seq = self.rnd.choice(live)
            keep = self.rnd.randint(0, len(self.tokens[seq]))
            self.cache.truncate(seq, keep)
            del self.tokens[seq][keep:], self.values[seq][keep:]
        else:
            self.cache.compact()
            stats = self.cache.stats()
            assert stats.pool_span == stats.used_blocks

    def prompt(self) -> list[int]:
        n = self.rnd.randint(0, 40)
        if self.cache.prefix is not None and self.history and self.rnd.random() < 0.5:
            shared = self.rnd.choice(self.history)      # a common "system prompt" followed by a new tail
            return shared[:self.rnd.randint(0, len(shared))] + self.new_tokens(self.rnd.randint(0, 8))
        return self.new_tokens(n)

    def allocate(self) -> None:
        seq, tokens = self.next_id, self.prompt()
        n = len(tokens)
        if not self.cache.can_allocate(n):
            with pytest.raises(CacheFullError):
                self.cache.allocate(seq, n, tokens)
            if self.tokens:                              # make room, as a scheduler would preempt
                victim = self.rnd.choice(list(self.tokens))
                self.cache.free(victim)
                del self.tokens[victim], self.values[victim]
            return
        self.history = (self.history + [tokens])[-8:]
        self.next_id += 1
        values = rolling([], tokens)
        if self.cache.prefix is not None:
            cached = self.cache.allocate_prefix(seq, tokens)
            assert _read(self.cache, seq) == values[:cached]        # reused blocks hold this very prefix
            _write(self.cache, self.cache.append(seq, n - cached, tokens[cached:]), values[cached:])
        else:
            _write(self.cache, self.cache.allocate(seq, n, tokens), values)
        self.tokens[seq], self.values[seq] = tokens, values

    def append(self, seq, n: int) -> None:
        before = (self.cache.length(seq), self.cache.block_table(seq), self.cache.allocator.num_free)
        tokens = self.new_tokens(n)
        if not self.cache.can_append(seq, n):
            with pytest.raises(CacheFullError):
                self.cache.append(seq, n, tokens)
            assert (self.cache.length(seq), self.cache.block_table(seq), self.cache.allocator.num_free) == before
            return
        values = rolling(self.values[seq], tokens)
        _write(self.cache, self.cache.append(seq, n, tokens), values)
        self.tokens[seq] += tokens
        self.values[seq] += values

    def fork(self, parent) -> None:
        child, self.next_id = self.next_id, self.next_id + 1
        self.cache.fork(parent, child)
        self.tokens[child], self.values[child] = list(self.tokens[parent]), list(self.values[parent])

    def check(self, contents: bool) -> None:
        assert self.cache.validate() == []
        alloc = self.cache.allocator
        assert alloc.num_free + alloc.num_used == alloc.num_blocks
        if contents:
            for seq, values in self.values.items():
                assert self.cache.length(seq) == len(values)
                assert _read(self.cache, seq) == values


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(num_blocks=st.integers(1, 48), block_size=st.sampled_from([1, 2, 3, 4, 16]), seed=st.integers(0, 2**32),
       prefix_caching=st.booleans())
def test_random_interleavings_keep_invariants_and_contents(num_blocks, block_size, seed, prefix_caching):
    # the operation stream comes from a seeded PRNG: drawing 10^5 choices through hypothesis is far slower
    cache = _cache(num_blocks, block_size, prefix_caching)
    model = Model(cache, random.Random(seed))
    for i in range(OPS_PER_EXAMPLE):
        model.step()
        model.check(contents=i % 50 == 0)
    model.check(contents=True)
    for seq in list(model.tokens):
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


def test_prefix_blocks_are_found_after_free_and_forgotten_when_reused():
    cache = _cache(4, 2, prefix_caching=True)
    tokens = [5, 6, 7, 8, 9]
    _write(cache, cache.allocate("a", 5, tokens), rolling([], tokens))
    cache.free("a")                                              # blocks 0, 1 stay findable on the free list
    assert cache.stats().prefix_cached_blocks == 2
    assert cache.allocate_prefix("b", [5, 6, 7, 8, 1]) == 4      # both full blocks reused
    assert cache.block_table("b") == [0, 1] and _read(cache, "b") == rolling([], [5, 6, 7, 8])
    assert cache.allocate_prefix("c", [5, 6, 7, 9, 9]) == 2      # diverges in the second block
    assert cache.stats().shared_blocks == 1
    assert cache.allocate_prefix("d", [5, 6]) == 0               # the last token is always recomputed
    for seq in ("b", "c", "d"):
        cache.free(seq)
    cache.allocate("e", 8, [1] * 8)                              # reuses every block: old entries are gone
    assert cache.allocate_prefix("f", [5, 6, 7, 8, 9]) == 0
    assert cache.validate() == []


def test_prefix_match_guards_against_hash_collisions():
    cache = _cache(4, 2, prefix_caching=True)
    cache.allocate("a", 2, [1, 2])
    entry = cache.prefix.by_block[0]
    cache.prefix.by_block[0] = type(entry)(entry.key, (3, 4), entry.parent)   # same hash, other tokens
    assert cache.allocate_prefix("b", [1, 2, 3]) == 0
