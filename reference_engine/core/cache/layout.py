"""What each decoder layer keeps between steps: the two kinds of layer cache, as data.

An attention layer keeps something per token, in the paged pools (`KVLayout`): K and V of `heads` heads for
GQA; MLA keeps one compressed latent plus the rope key per token (`heads=1, k_dim=kv_lora_rank + rope_dim,
v_dim=0`). A recurrent layer (Gated DeltaNet, Mamba2 SSD, short convolution) keeps a fixed-size state per
sequence whatever its length (`StateLayout`: named tensors, e.g. the conv window and the recurrent state).
A layer that runs attention and a recurrent mixer side by side (Falcon-H1) keeps both (`ParallelLayout`).
A family states its layout (core/families: `cache_layout(config)`); the KV cache, the memory plan and
`probe kv` all read the bytes from here, never a dense K/V guess.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVLayout:
    """Per token: K [heads, k_dim] and V [heads, v_dim] (v_dim 0: nothing stored for V)."""
    heads: int
    k_dim: int
    v_dim: int


@dataclass(frozen=True)
class StateLayout:
    """Per sequence: named state tensors of fixed shapes (no per-token growth)."""
    tensors: tuple[tuple[str, tuple[int, ...]], ...]

    def numel(self) -> int:
        total = 0
        for _, shape in self.tensors:
            n = 1
            for d in shape:
                n *= d
            total += n
        return total


@dataclass(frozen=True)
class ParallelLayout:
    """Both kinds in one layer: K/V per token for its attention, a state per sequence for its recurrent mixer."""
    kv: KVLayout
    state: StateLayout


LayerCache = KVLayout | StateLayout | ParallelLayout


def kv_part(c: LayerCache) -> KVLayout | None:
    """What the layer keeps per token in the paged pools (None: nothing)."""
    return c.kv if isinstance(c, ParallelLayout) else c if isinstance(c, KVLayout) else None


def state_part(c: LayerCache) -> StateLayout | None:
    """What the layer keeps per sequence as a recurrent state (None: nothing)."""
    return c.state if isinstance(c, ParallelLayout) else c if isinstance(c, StateLayout) else None


def dense_layout(num_layers: int, kv_heads: int, head_dim: int) -> list[LayerCache]:
    """The classic layout: every layer keeps K and V of kv_heads heads of head_dim."""
    return [KVLayout(kv_heads, head_dim, head_dim)] * num_layers


def element_bytes(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def bytes_per_token(layout: list[LayerCache], dtype: torch.dtype) -> int:
    """Bytes the paged pools hold per token, all attention layers together."""
    kvs = [kv_part(c) for c in layout]
    return sum(c.heads * (c.k_dim + c.v_dim) for c in kvs if c is not None) * element_bytes(dtype)


def state_bytes_per_sequence(layout: list[LayerCache], dtype: torch.dtype | None = None) -> int:
    """Bytes of recurrent state one sequence holds, all recurrent layers together (constant in its length).
    States are kept in float32 whatever the model dtype (as transformers' recurrent caches accumulate), so
    `dtype` does not change the figure."""
    return sum(s.numel() for s in map(state_part, layout) if s is not None) * 4


def is_hybrid(layout: list[LayerCache]) -> bool:
    return any(state_part(c) is not None for c in layout)
