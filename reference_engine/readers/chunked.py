"""Which chunked reader reads a model's weights: safetensors byte ranges as they are, GGUF tensors and quantized
safetensors (files/quant/) dequantized.

A module of its own so that gguf_reader.py (built on layer_reader.py) and layer_reader.py import one way.
"""
from __future__ import annotations

from reference_engine.readers.layer_reader import ChunkedWeights


def chunked_reader(weights, gguf: bool) -> ChunkedWeights:
    """The chunked reader over a model's weights (the resident loader and the streaming core both read with it).
    A table that computes its tensors (an adapter merged into a base) brings its own reader."""
    own = getattr(weights, "chunked_reader", None)
    if own is not None:
        return own()
    if gguf:   # imported here: gguf's kernels need numpy, which a safetensors run never loads
        from reference_engine.readers.gguf_reader import GGUFChunkedWeights
        return GGUFChunkedWeights(weights)
    if hasattr(weights, "modules") and hasattr(weights, "raw"):     # files/quant/ QuantizedWeights
        from reference_engine.readers.quant_reader import QuantChunkedWeights
        return QuantChunkedWeights(weights)
    return ChunkedWeights(weights)
