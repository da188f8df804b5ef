"""Attention over the paged KV cache for one engine step (a ragged batch of sequences).

Everything that depends only on the batch layout (positions, slot mapping, gather indices, masks) is built
once per step in `StepMetadata` and reused by every layer, so a layer costs a fixed handful of tensor ops.
Tokens travel packed ([num_tokens, ...], sequence after sequence); attention pads them to
[batch, max_new_tokens] only around `scaled_dot_product_attention`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reference_engine.core.cache.kv_cache import PagedKVCache
from reference_engine.core.sink_attention import sink_attention


@dataclass
class StepMetadata:
    batch: int
    max_query: int                    # longest run of new tokens in the batch
    max_context: int                  # longest context (cached + new) in the batch
    positions: torch.Tensor           # [num_tokens] int64: RoPE position of each new token
    slot_mapping: torch.Tensor        # [num_tokens] int64: where each new token's K/V is written
    query_index: torch.Tensor | None  # [num_tokens] row of each token in padded [batch * max_query]; None: no padding
    context_slots: torch.Tensor | None  # [batch, max_context] slots to gather; None: use context_range
    context_range: tuple[int, int] | None  # (first slot, count) when the one sequence's slots are contiguous
    mask: torch.Tensor | None         # [batch, 1, max_query, max_context] bool (True = may attend)
    query_pos: torch.Tensor | None    # [batch, max_query] for window masks
    key_pos: torch.Tensor | None      # [1, max_context]
    is_causal: bool                   # one fresh sequence: plain causal attention, no mask needed
    _window_masks: dict | None = None
    ends: torch.Tensor | None = None  # [num_tokens] int64 on the CPU: the length its sequence reaches this step
    # the batch as recurrent layers see it: sequence by sequence, each run of new tokens [starts[b], + counts[b])
    seq_ids: tuple = ()
    starts: tuple[int, ...] = ()      # tokens each sequence had before this step (0: a fresh state)
    counts: tuple[int, ...] = ()      # its new tokens, packed one sequence after another

    def window_mask(self, window: int | None) -> torch.Tensor | None:
        """The step mask restricted to keys within `window` positions of the query (sliding window)."""
        if window is None:
            return self.mask
        if self._window_masks is None:
            self._window_masks = {}
        if window not in self._window_masks:
            base = self.mask if self.mask is not None else self._full_causal()
            near = (self.key_pos[:, None, :] > self.query_pos[:, :, None] - window)[:, None]
            self._window_masks[window] = base & near
        return self._window_masks[window]

    def chunk_mask(self, chunk: int) -> torch.Tensor:
        """The step mask restricted to keys in the query's own chunk (Llama 4's chunked local attention:
        positions [k * chunk, (k + 1) * chunk) see only each other, causally)."""
        if self._window_masks is None:
            self._window_masks = {}
        key = ("chunk", chunk)
        if key not in self._window_masks:
            base = self.mask if self.mask is not None else self._full_causal()
            same = (self.key_pos[:, None, :] // chunk == self.query_pos[:, :, None] // chunk)[:, None]
            self._window_masks[key] = base & same
        return self._window_masks[key]

    def _full_causal(self) -> torch.Tensor:
        return (self.key_pos[:, None, :] <= self.query_pos[:, :, None])[:, None]


def build_metadata(cache: PagedKVCache, seq_ids: list, starts: list[int], counts: list[int],
                   slot_mapping: torch.Tensor, device) -> StepMetadata:
    """starts[i]: tokens sequence i had cached before this step; counts[i]: its new tokens."""
    batch = len(seq_ids)
    ctx = [s + n for s, n in zip(starts, counts)]
    max_query, max_context = max(counts), max(ctx)
    positions = torch.cat([torch.arange(s, s + n, dtype=torch.int64) for s, n in zip(starts, counts)])
    ends = torch.repeat_interleave(torch.tensor(ctx, dtype=torch.int64), torch.tensor(counts))
    if batch == 1:
        table = cache.tables[seq_ids[0]]
        contiguous = all(b == table[0] + i for i, b in enumerate(table))
        fresh = starts[0] == 0
        context_range = (table[0] * cache.block_size, ctx[0]) if contiguous else None
        context_slots = None if contiguous else cache.slots(seq_ids[0], 0, ctx[0])[None].to(device)
        needs_mask = not fresh and counts[0] > 1  # a chunk after cached tokens: causal offset by start
        query_pos = positions[None].to(device)
        key_pos = torch.arange(max_context, dtype=torch.int64, device=device)[None]
        mask = (key_pos[:, None, :] <= query_pos[:, :, None])[:, None] if needs_mask else None
        return StepMetadata(1, max_query, max_context, positions.to(device), slot_mapping.to(device), None,
                            context_slots, context_range, mask, query_pos, key_pos,
                            is_causal=fresh and counts[0] > 1, ends=ends,
                            seq_ids=tuple(seq_ids), starts=tuple(starts), counts=tuple(counts))
    # padded layout: row b, column j holds the j-th new token of sequence b
    query_index = torch.cat([torch.arange(n, dtype=torch.int64) + b * max_query for b, n in enumerate(counts)])
    key_pos = torch.arange(max_context, dtype=torch.int64)[None]                      # [1, K]
    query_pos = torch.zeros(batch, max_query, dtype=torch.int64)                      # padded rows see key 0
    query_pos.view(-1)[query_index] = positions
    context_len = torch.tensor(ctx, dtype=torch.int64)[:, None]                        # [B, 1]
    mask = (key_pos[:, None, :] <= query_pos[:, :, None]) & (key_pos < context_len)[:, None, :]
    # padded key columns gather the sequence's own first slot: always written, always finite
    context_slots = torch.stack([
        torch.cat([cache.slots(s, 0, c), cache.slots(s, 0, 1).expand(max_context - c)])
        for s, c in zip(seq_ids, ctx)])
    if max_query == 1:
        query_index = None    # a pure decode step: one token per sequence, the packed layout is already [B, 1]
    else:
        query_index = query_index.to(device)
    return StepMetadata(batch, max_query, max_context, positions.to(device), slot_mapping.to(device),
                        query_index, context_slots.to(device), None, mask[:, None].to(device),
                        query_pos.to(device), key_pos.to(device), is_causal=False, ends=ends,
                        seq_ids=tuple(seq_ids), starts=tuple(starts), counts=tuple(counts))


def gather_context(flat: torch.Tensor, meta: StepMetadata) -> torch.Tensor:
    """[batch, kv_heads, max_context, dim] view or gather of a layer's cached keys or values (or MLA latents)."""
    if meta.context_range is not None:
        first, count = meta.context_range
        return flat[first:first + count].unsqueeze(0).transpose(1, 2)
    # index_select on the flattened slots: ~4x faster than advanced indexing (flat[slots]) on CPU, same copy
    slots = meta.context_slots
    gathered = flat.index_select(0, slots.view(-1)).view(*slots.shape, *flat.shape[1:])   # [B, K, kv_heads, d]
    return gathered.transpose(1, 2)


def paged_attention(q: torch.Tensor, cache: PagedKVCache, layer: int, meta: StepMetadata,
                    window: int | None = None, scale: float | None = None,
                    softcap: float | None = None, chunk: int | None = None,
                    sinks: torch.Tensor | None = None) -> torch.Tensor:
    """q [num_tokens, heads, head_dim] (RoPE applied; this step's K/V already written)
    -> [num_tokens, heads * head_dim].
    scale: None = head_dim ** -0.5; softcap (Gemma 2): scores -> softcap * tanh(scores / softcap) before the mask;
    chunk (Llama 4): keys only from the query's own chunk of positions; sinks [heads] (gpt-oss): one learned
    logit per head inside the softmax (sink_attention.py)."""
    k = gather_context(cache.flat_k(layer), meta)
    v = gather_context(cache.flat_v(layer), meta)
    return attend(q, k, v, meta, window, scale, softcap, chunk, sinks)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: StepMetadata, window: int | None = None,
           scale: float | None = None, softcap: float | None = None, chunk: int | None = None,
           sinks: torch.Tensor | None = None) -> torch.Tensor:
    """q [num_tokens, heads, qk_dim] packed; k [B, kv_heads, max_context, qk_dim], v [B, kv_heads, max_context,
    v_dim] gathered -> [num_tokens, heads * v_dim] (v_dim may differ from qk_dim: MLA)."""
    num_tokens, heads, head_dim = q.shape
    if meta.query_index is None:                                              # no padding needed
        q4 = q.reshape(meta.batch, meta.max_query, heads, head_dim).transpose(1, 2)   # [B, heads, Q, head_dim]
    else:
        padded = q.new_zeros(meta.batch * meta.max_query, heads, head_dim)
        padded[meta.query_index] = q
        q4 = padded.view(meta.batch, meta.max_query, heads, head_dim).transpose(1, 2)
    mask = meta.window_mask(window) if window is not None and window < meta.max_context else meta.mask
    if chunk is not None and chunk < meta.max_context:
        mask = meta.chunk_mask(chunk)
    causal = meta.is_causal and mask is None
    scale = head_dim ** -0.5 if scale is None else scale
    if sinks is not None:
        out = sink_attention(q4, k, v, mask, causal, scale, sinks)
    elif softcap is not None:
        out = softcapped_attention(q4, k, v, mask, causal, scale, softcap)
    else:
        out = F.scaled_dot_product_attention(q4, k, v, attn_mask=mask, is_causal=causal,
                                             scale=scale, enable_gqa=k.shape[1] != heads)
    out = out.transpose(1, 2).reshape(meta.batch * meta.max_query, heads * v.shape[-1])
    return out if meta.query_index is None else out[meta.query_index]


def softcapped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                         causal: bool, scale: float, softcap: float) -> torch.Tensor:
    """transformers' eager attention with logit soft-capping (SDPA has no soft-cap): q [B, H, Q, d],
    k/v [B, kv_heads, K, d], mask [B, 1, Q, K] bool or None -> [B, H, Q, d]."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * scale                      # [B, H, Q, K]
    scores = torch.tanh(scores / softcap) * softcap
    if causal:
        qn, kn = scores.shape[-2:]
        mask = torch.ones(qn, kn, dtype=torch.bool, device=q.device).tril(kn - qn)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)
