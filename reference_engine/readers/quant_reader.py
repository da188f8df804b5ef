"""The chunked reader (layer_reader.py, readers.py) over a quantized checkpoint (files/quant/): a quantized
weight is read part by part (packed integers, scales, zeros, g_idx) with the same plain reads that let the page
cache go, then dequantized by its format's formula; `bytes_read` counts the quantized bytes, as for GGUF."""
from __future__ import annotations

import torch

from reference_engine.readers.layer_reader import ChunkedWeights
from reference_engine.files.reads import SAFETENSORS_DTYPES, drop_cached


class QuantChunkedWeights(ChunkedWeights):
    """ChunkedWeights over a QuantizedWeights (`self.weights`): `get` and `rows` return float32 for quantized
    weights and the stored tensor for the others."""
    read_ahead = False           # its tensors are dequantized as read (a thread would hold their copies)

    def get(self, name: str) -> torch.Tensor:
        module = self.weights.modules.get(name)
        if module is None:
            return super().get(name)
        parts = {role: self._stored(stored) for role, stored in module.parts.items()}
        return self.weights.dequantize(module, parts)

    def rows(self, name: str, start: int, end: int) -> torch.Tensor:
        if name not in self.weights.modules:
            return super().rows(name, start, end)
        return self.get(name)[start:end]      # a quantized head (rare): dequantized whole, each block

    def drop_tensor(self, name: str) -> None:
        module = self.weights.modules.get(name)
        if module is None:
            return super().drop_tensor(name)
        if self.drop_cache:
            for stored in module.parts.values():
                info = self.weights.raw.info(stored)
                drop_cached(self._files.fd(info.file), info.offset, info.nbytes)

    def _stored(self, stored: str) -> torch.Tensor:
        info = self.weights.raw.info(stored)
        return self._read_bytes(info, info.offset, info.nbytes).view(SAFETENSORS_DTYPES[info.dtype]).view(info.shape)
