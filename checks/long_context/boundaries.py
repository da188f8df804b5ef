"""Where a config says attention or positions change: the sliding window (and on how many layers), a chunked
attention's chunk, the rope's original length (yarn/llama3/longrope: past it the scaling takes over; LongRoPE
switches factors there), the declared maximum. CTX findings name the one nearest to where reading stops."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Boundary:
    name: str          # what sets it, e.g. "sliding_window (on 15 of 18 layers)"
    tokens: int


def rope_block(raw: dict) -> dict:
    """The rope scaling block of a raw config: rope_scaling, else transformers 5's rope_parameters (either a
    block, or per layer type {"full_attention": {...}, "sliding_attention": {...}}: the full layers' one)."""
    block = raw.get("rope_scaling")
    if isinstance(block, dict):
        return block
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get("full_attention"), dict):
        params = params["full_attention"]
    return params if isinstance(params, dict) else {}


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def boundaries(raw: dict, windows: list | None = None) -> list[Boundary]:
    """The config's boundaries, ascending. windows: the engine's window per layer (None: a full layer)."""
    out = []
    if windows:
        for w in sorted({w for w in windows if w}):
            count = sum(1 for x in windows if x == w)
            out.append(Boundary(f"sliding_window (on {count} of {len(windows)} layers)", int(w)))
    elif _int(raw.get("sliding_window")):
        out.append(Boundary("sliding_window", raw["sliding_window"]))
    if _int(raw.get("attention_chunk_size")):
        out.append(Boundary("attention_chunk_size", raw["attention_chunk_size"]))
    block = rope_block(raw)
    original = _int(block.get("original_max_position_embeddings")) or _int(raw.get("original_max_position_embeddings"))
    kind = block.get("rope_type", block.get("type"))
    if original:
        switch = " (LongRoPE switches to its long factors)" if kind == "longrope" else ""
        out.append(Boundary(f"original_max_position_embeddings of the {kind} rope scaling{switch}", original))
    if _int(raw.get("max_position_embeddings")):
        out.append(Boundary("max_position_embeddings (declared)", raw["max_position_embeddings"]))
    return sorted(out, key=lambda b: b.tokens)


def nearest(bounds: list[Boundary], reads: int, fails: int) -> Boundary | None:
    """The boundary in (reads, fails]; else the one closest to `fails` (a window above it that still breaks
    reading there: stacked windows blur a copy before the window's edge), the declared maximum only when it is
    at or below `fails`; None when there is none."""
    inside = [b for b in bounds if reads < b.tokens <= fails]
    if inside:
        return inside[0]
    near = [b for b in bounds if not b.name.startswith("max_position_embeddings") or b.tokens <= fails]
    return min(near, key=lambda b: abs(math.log(b.tokens / max(fails, 1))), default=None)


@dataclass(frozen=True)
class DesignWindow:
    """A sliding window that is the model's design, not a fault: Mistral-7B-v0.1 (4096 on all 32 layers of
    32768 positions), Phi-3-mini-4k (2047 of 4096). Reading stops at it by construction."""
    tokens: int
    layers: int
    declared: int


def design_window(raw: dict, windows: list | None) -> DesignWindow | None:
    """The window when the config declares it for every layer and agrees with itself: one window on every
    layer, set by `sliding_window` alone (no layer_types naming kinds: a list of kinds that are all sliding is
    Gemma 3's pattern overwritten, CFG063), below the declared length, and the layers stacked reach the
    declared length (layers x window >= max_position_embeddings: each layer looks `window` back from what the
    one below saw, Mistral's own account of its 4096 window at 32768 positions). None otherwise: no window,
    a pattern of kinds, or a declared length no stack of windows reaches (a window from another model's config
    template, as tests/checks/long_context/faults.py `short_window`: 30 x 256 = 7680 < 8192)."""
    declared = _int(raw.get("max_position_embeddings"))
    if not windows or not declared or isinstance(raw.get("layer_types"), list):
        return None
    kinds = set(windows)
    if len(kinds) != 1 or None in kinds:
        return None
    window = int(next(iter(kinds)))
    if window >= declared or len(windows) * window < declared:
        return None
    return DesignWindow(window, len(windows), declared)
