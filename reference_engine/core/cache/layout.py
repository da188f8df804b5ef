"""What each decoder layer keeps between steps: the two kinds of layer cache, as data.

An attention layer keeps something per token, in the paged pools (`KVLayout`): K and V of `heads` heads for
GQA; MLA keeps one compressed latent plus the rope key per token (`heads=1, k_dim=kv_lora_rank + rope_dim,
v_dim=0`). A recurrent layer (Gated DeltaNet, Mamba2 SSD, short convolution) keeps a fixed-size state per
sequence whatever its length (`StateLayout`: named tensors, e.g. the conv window and the recurrent state).
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


LayerCache = KVLayout | StateLayout


def dense_layout(num_layers: int, kv_heads: int, head_dim: int) -> list[LayerCache]:
    """The classic layout: every layer keeps K and V of kv_heads heads of head_dim."""
    return [KVLayout(kv_heads, head_dim, head_dim)] * num_layers


def element_bytes(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def bytes_per_token(layout: list[LayerCache], dtype: torch.dtype) -> int:
    """Bytes the paged pools hold per token, all attention layers together."""
    return sum(c.heads * (c.k_dim + c.v_dim) for c in layout if isinstance(c, KVLayout)) * element_bytes(dtype)


def state_bytes_per_sequence(layout: list[LayerCache], dtype: torch.dtype | None = None) -> int:
    """Bytes of recurrent state one sequence holds, all recurrent layers together (constant in its length).
    States are kept in float32 whatever the model dtype (as transformers' recurrent caches accumulate), so
    `dtype` does not change the figure."""
    return sum(c.numel() for c in layout if isinstance(c, StateLayout)) * 4


def is_hybrid(layout: list[LayerCache]) -> bool:
    return any(isinstance(c, StateLayout) for c in layout)
