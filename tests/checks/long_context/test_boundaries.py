"""boundaries.design_window: a window the config declares for every layer is the model's design where its layers
stacked reach the declared length (Mistral-7B-v0.1, Phi-3-mini-4k); a list of kinds all sliding (Gemma 3's
pattern overwritten) or a window no stack reaches the declared length with is not. Pure: no model."""
from __future__ import annotations

import pytest

from checks.long_context.boundaries import DesignWindow, design_window


def shape(layers: int, window: int | None, declared: int, **more) -> tuple[dict, list]:
    return {"max_position_embeddings": declared, "sliding_window": window, **more}, [window] * layers


@pytest.mark.parametrize("name,layers,window,declared", [
    ("mistral-7b-v0.1", 32, 4096, 32768), ("phi-3-mini-4k", 32, 2047, 4096),
    ("smollm2 window 256 of 2048", 30, 256, 2048), ("smollm2 window 512 of 1024", 30, 512, 1024)])
def test_a_window_on_every_layer_that_stacks_to_the_declared_length_is_the_design(name, layers, window, declared):
    raw, windows = shape(layers, window, declared)
    assert design_window(raw, windows) == DesignWindow(window, layers, declared)


def test_what_is_not_a_design_window():
    raw, windows = shape(30, 256, 8192)          # faults.short_window: 30 x 256 = 7680 short of 8192
    assert design_window(raw, windows) is None
    raw, windows = shape(18, 512, 32768, layer_types=["sliding_attention"] * 18)   # Gemma 3, every layer sliding
    assert design_window(raw, windows) is None
    raw, windows = shape(4, 512, 32768)
    assert design_window(raw, windows[:3] + [None]) is None       # a full layer among them: a pattern
    raw, windows = shape(32, 32768, 32768)
    assert design_window(raw, windows) is None                    # a window at the declared length bounds nothing
    assert design_window({"max_position_embeddings": 8192}, [None] * 30) is None
