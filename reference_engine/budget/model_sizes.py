"""A model's sizes for the memory plan (plan.py), from the tensor headers alone: nothing is loaded.

Two measures per decoder layer, because they differ for a quantized file: its element count (what the
compute copy holds, in the compute dtype) and its file bytes (what a streaming pass reads: the safetensors
bytes, or a GGUF file's quantized bytes). A Hugging Face directory and a GGUF file (reference_engine/files/
source.py) give the same fields; a GGUF is dequantized to float32 tensor by tensor before the cast, which
costs one float32 copy of the tensor being loaded and gguf's kernel scratch (budget/gguf_reader.py). A quantized
safetensors directory (files/quant/) counts each weight's stored parts as its file bytes, its logical shape as
its elements, and its dequantization's scratch per element (measured, files/quant/formats.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from reference_engine.config import ModelConfig
from reference_engine.source import model_source

LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.")


@dataclass
class ModelSizes:
    root: Path                   # the model directory or the GGUF file (what error messages name)
    config: ModelConfig
    layer_elems: list[int]       # elements of each decoder layer
    layer_files: list[int]       # bytes read from the file for each decoder layer
    layer_largest: list[int]     # elements of each layer's largest tensor
    file_bytes: int              # every tensor's bytes in the file(s)
    head_file_bytes: int         # the LM head's bytes in the file (the embedding when tied)
    largest_elems: int           # the largest tensor of the model (embedding or head, usually)
    gguf: bool = False
    quant_scratch: int = 0       # quantized safetensors: peak bytes per element while dequantizing a tensor

    @property
    def reads_ahead(self) -> bool:
        """Whether streaming reads the next layer while this one computes (readers/read_ahead.py): plain
        safetensors files; GGUF and quantized tensors are dequantized as they are read, on the main thread."""
        return not self.gguf and not self.quant_scratch

    def head_bytes_per_elem(self) -> float:
        """File bytes per LM-head element (quantized: a fraction of a byte)."""
        vocab_rows = self.config.vocab_size * self.config.hidden_size
        return self.head_file_bytes / vocab_rows if vocab_rows else 0.0

    def dequant_bytes(self, largest: int, elem: int) -> int:
        """Transient of loading one GGUF tensor of `largest` elements (budget/gguf_reader.py, resident and
        streaming): its float32 copy before the cast to a narrower compute dtype (in float32 it is the compute
        copy itself) and gguf's kernel scratch (~1x its float32 output, a few rows at a time)."""
        if self.quant_scratch:
            return largest * self.quant_scratch      # the float32 result included
        if not self.gguf:
            return 0
        from reference_engine.readers.gguf_reader import DEQUANT_CHUNK_BYTES
        return (largest * 4 if elem != 4 else 0) + min(DEQUANT_CHUNK_BYTES, largest * 4)


def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def model_sizes(model_dir, adapter=None) -> ModelSizes:
    """Sizes of a Hugging Face directory (safetensors headers) or a GGUF file (its validated tensor infos);
    with a LoRA adapter, of the adapted model (a resized vocabulary is the adapter's)."""
    source = model_source(model_dir, adapter)
    config, weights = source.config, source.open_weights()
    n = config.num_hidden_layers
    elems, files, largest = [0] * n, [0] * n, [0] * n
    for name in weights.names:
        m = LAYER_NAME.match(name)
        if m and int(m.group(1)) < n:
            i, info = int(m.group(1)), weights.info(name)
            elems[i] += _numel(info.shape)
            files[i] += info.nbytes
            largest[i] = max(largest[i], _numel(info.shape))
    head = "model.embed_tokens.weight" if config.tie_word_embeddings or "lm_head.weight" not in weights \
        else "lm_head.weight"
    head_bytes = weights.info(head).nbytes if head in weights else 0
    biggest = max((_numel(weights.info(name).shape) for name in weights.names), default=0)
    if source.gguf is not None:      # every tensor, the llama.cpp-only ones (rope_freqs, ...) included
        total = sum(t.nbytes for t in getattr(weights, "base", weights).gguf.tensors.values())
    else:
        total = sum(weights.info(name).nbytes for name in weights.names)
    scratch = 0
    if source.quantization is not None:
        from reference_engine.files.quant.formats import scratch_bytes_per_elem
        scratch = scratch_bytes_per_elem(weights)
        biggest = max((_numel(weights.info(name).shape) for name in weights.modules), default=0)
    return ModelSizes(source.root, config, elems, files, largest, total, head_bytes, biggest,
                      source.gguf is not None, scratch)
