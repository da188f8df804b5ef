"""The call context of a token mixer: what a layer needs besides its input and weights in one forward step."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LayerStep:
    """One layer of one forward step, as every mixer (model.MIXERS) reads it: `mixer(x, w, config, step)`."""
    layer: int
    cache: Any                   # cache.kv_cache.PagedKVCache: this layer's K/V pools and `cache.states`
    meta: Any                    # attention.StepMetadata: positions, slots and each sequence's run of tokens
    cos: torch.Tensor            # [T, rot] rotary tables at the step's positions ([2, T, rot]: local ones too)
    sin: torch.Tensor
    window: int | None = None    # the layer's sliding window (None: full attention)
    # project(x [T, in], weight [out, in], bias | None) -> [T, out]: F.linear, or linear.decode_linear
    linear: Callable = F.linear
