"""Prefix caching for the paged KV cache: full blocks are found again by a hash of their tokens chained
with the hash of the block before them (so a block only matches after the same whole prefix), with a
token-equality guard against hash collisions, as vLLM and nano-vllm do.

A registered block keeps its entry after its last owner frees it; it sits on the free list and is reused
as-is by a later hit, or forgotten when the allocator hands it out for new content.
"""
from __future__ import annotations

from dataclasses import dataclass

ROOT_HASH = 0


@dataclass(frozen=True)
class CachedBlock:
    key: int                  # chained hash
    tokens: tuple[int, ...]   # the block's tokens (collision guard)
    parent: int               # chained hash of the block before it (ROOT_HASH for the first)


def chain_hash(parent: int, tokens: tuple[int, ...]) -> int:
    return hash((parent, tokens))   # ints and tuples of ints hash deterministically in CPython


class PrefixCache:
    def __init__(self, block_size: int):
        self.block_size = block_size
        self.by_key: dict[int, int] = {}              # chained hash -> block
        self.by_block: dict[int, CachedBlock] = {}    # block -> what it holds
        self.hits = self.queries = 0

    def __len__(self) -> int:
        return len(self.by_block)

    def match(self, tokens: list[int], max_blocks: int) -> list[int]:
        """Blocks holding the longest cached run of full leading blocks of `tokens` (at most max_blocks)."""
        bs, parent, found = self.block_size, ROOT_HASH, []
        for i in range(min(max_blocks, len(tokens) // bs)):
            chunk = tuple(tokens[i * bs:(i + 1) * bs])
            key = chain_hash(parent, chunk)
            block = self.by_key.get(key)
            entry = self.by_block.get(block) if block is not None else None
            if entry is None or entry.tokens != chunk or entry.parent != parent:
                break
            found.append(block)
            parent = key
        self.queries += 1
        self.hits += bool(found)
        return found

    def register(self, block: int, parent: int, tokens: tuple[int, ...]) -> int:
        """Record that `block` holds the full block `tokens` after the prefix hashed `parent`; its hash."""
        key = chain_hash(parent, tokens)
        existing = self.by_key.get(key)
        if existing == block:
            return key
        self.forget(block)
        if existing is None:                # else an identical block elsewhere already serves this prefix
            self.by_key[key] = block
            self.by_block[block] = CachedBlock(key, tokens, parent)
        return key

    def forget(self, block: int) -> None:
        entry = self.by_block.pop(block, None)
        if entry is not None and self.by_key.get(entry.key) == block:
            del self.by_key[entry.key]

    def remap(self, mapping: dict[int, int]) -> None:
        """After compaction: keep entries of moved live blocks, drop those of free blocks (overwritten)."""
        entries = {mapping[b]: e for b, e in self.by_block.items() if b in mapping}
        self.by_block = entries
        self.by_key = {e.key: b for b, e in entries.items()}

    def validate(self, ref_counts: list[int]) -> list[str]:
        problems = []
        for key, block in self.by_key.items():
            if self.by_block.get(block) is None or self.by_block[block].key != key:
                problems.append(f"prefix cache maps a hash to block {block}, which does not hold it")
                break
        if any(not 0 <= b < len(ref_counts) for b in self.by_block):
            problems.append("prefix cache points at blocks outside the pool")
        return problems
