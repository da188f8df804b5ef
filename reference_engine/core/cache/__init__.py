"""The paged KV cache: a block allocator with ref counts, per-sequence block tables, prefix reuse, compaction."""
from reference_engine.core.cache.block_allocator import BlockAllocator, CacheFullError
from reference_engine.core.cache.kv_cache import CacheStats, PagedKVCache

__all__ = ["BlockAllocator", "CacheFullError", "CacheStats", "PagedKVCache"]
