"""StreamingCore: the transformer core holding one decoder layer's weights at a time, so a
model larger than the memory budget still runs.

Same API as CoreEngine (prefill/decode/logits/scratch/fork/free/validate over the paged KV cache) and the same
per-layer code: each layer is loaded just in time by `model_weights.load_layer_weights` (the function the
resident loader runs for every layer) from chunked reads of the validated safetensors byte ranges
(layer_reader.py) or of a GGUF file's quantized tensors, dequantized as read (gguf_reader.py), run through
`model.decoder_layer`, and overwritten by the next one (the same buffers, layer after layer: no fresh
allocation to page-fault in). Plain safetensors layers are read ahead: a thread reads layer i + 1 while layer
i computes (read_ahead.py). The embedding is read row by row (only the tokens of the step), the LM head in row
blocks (sweep.blocked_head), so no [vocab, hidden] copy is ever made.

Every step (and every `sweep.logits_many` batch) is one pass over the weights; `passes` and
`reader.bytes_read` count them, and `on_layer(done, total, bytes_read)` is called after each layer for a
progress bar. In a torch.distributed pipeline (pipeline.py) each rank loads only its own layers.

Logits equal the resident engine's: prefill runs the same kernels on the same inputs; the LM head is the same
F.linear split along the vocabulary. Each logit is still one dot product over hidden, but a BLAS picks its
summation order from the product's shape, so the split may change the last bits (4.8e-7 on an AMD EPYC):
tests/reference_engine/streaming/test_streaming.py holds both paths to 1e-5 of the largest logit in float32
(tests/same_sums.py), and to bit-identity where the head is one block. Decode uses the
oneDNN kernel on the plain tensors, where the resident engine uses the packed layout (both within 1e-4).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

from reference_engine.config import ModelConfig
from reference_engine.core import families
from reference_engine.core.attention import StepMetadata
from reference_engine.core.cache.kv_cache import PagedKVCache
from reference_engine.core.engine import CoreEngine, new_cache, resolve_device, resolve_dtype
from reference_engine.readers.layer_reader import ChunkedWeights
from reference_engine.readers.read_ahead import ReadAhead
from reference_engine.readers.chunked import chunked_reader
from reference_engine.core.model import emit_capture, check_supported, norm
from reference_engine.core.model_weights import (LayerWeights, check_tensor_table, layer_tensor_names,
                                                 load_layer_weights)
from reference_engine.core.rope import build_rope_table
from reference_engine.streaming.sweep import HEAD_BLOCK_BYTES, Lane, blocked_heads, embed_rows, run_layers
from reference_engine.source import model_source

EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"


class StreamedWeights:
    """Stands where CoreEngine keeps ModelWeights: nothing resident, `layers` has the right length."""

    def __init__(self, num_layers: int):
        self.layers = [None] * num_layers


class StreamingCore(CoreEngine):
    streaming = True

    def __init__(self, config: ModelConfig, reader: ChunkedWeights, rope, cache: PagedKVCache, device, dtype,
                 model_dir: Path | None = None, head_block_bytes: int = HEAD_BLOCK_BYTES, read_ahead: bool = True):
        super().__init__(config, StreamedWeights(config.num_hidden_layers), rope, cache, device, dtype, model_dir)
        self.reader = reader
        self.head_block_bytes = head_block_bytes
        self.passes = 0
        self.on_layer = None            # callable(layers_done, layers_total, bytes_read) | None
        self.pipeline = None            # pipeline.Pipeline when running across ranks
        self._norms: dict[torch.dtype, torch.Tensor] = {}
        self._buffers: dict = {}        # the loaded layer's tensors, overwritten by the next (model_weights.fill)
        self.ahead = None               # read_ahead.ReadAhead: the next layer read while this one computes
        if read_ahead and getattr(reader, "read_ahead", False):
            self.ahead = reader.ahead = ReadAhead()

    @classmethod
    def from_pretrained(cls, model_dir, device="cpu", dtype="float32", num_blocks: int | None = None,
                        block_size: int = 16, prefix_caching: bool = False,
                        head_block_bytes: int = HEAD_BLOCK_BYTES, adapter=None) -> "StreamingCore":
        source = model_source(model_dir, adapter)        # a Hugging Face directory or a GGUF file (+ a LoRA)
        root, config = source.root, source.config
        check_supported(config, source.config_path)
        device, torch_dtype = resolve_device(device), resolve_dtype(dtype)
        rope = build_rope_table(config, device, torch_dtype, str(source.config_path))
        weights = source.open_weights()
        check_tensor_table(weights, config, root)       # every tensor present and well-shaped before a pass
        reader = chunked_reader(weights, source.gguf is not None)
        cache = new_cache(config, num_blocks, block_size, torch_dtype, device, prefix_caching)
        return cls(config, reader, rope, cache, device, torch_dtype, root, head_block_bytes)

    # ---- the sweep source interface (sweep.py) --------------------------------------------------------
    def layer(self, i: int) -> LayerWeights:
        """Layer i's weights (read ahead while layer i - 1 computed, when the reader can), and the reads of
        layer i + 1 queued to run while layer i computes (read_ahead.py)."""
        if self.ahead is None:
            return load_layer_weights(self.reader, self.config, i, self.device, self.dtype, self._buffers)
        names = layer_tensor_names(self.config, i)
        if not self.ahead.queued(names[0]):          # the first layer of a pass: read through the thread too
            self.reader.queue(names)
        weights = load_layer_weights(self.reader, self.config, i, self.device, self.dtype, self._buffers)
        end = self.pipeline.end if self.pipeline is not None else self.config.num_hidden_layers
        if i + 1 < end:
            self.reader.queue(layer_tensor_names(self.config, i + 1))
        return weights

    def layer_done(self, i: int) -> None:
        if self.ahead is None:             # else the read-ahead thread drops the page cache after each layer
            self.reader.drop_all()
        if self.on_layer is not None:
            self.on_layer(i + 1, self.config.num_hidden_layers, self.reader.bytes_read)

    def embed(self, tokens: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        rows = self.reader.gather_rows(EMBED, tokens)                       # [T, hidden], file dtype
        return embed_rows(rows.to(device=self.device, dtype=self.dtype).to(dtype), self.config)

    def norm(self, dtype: torch.dtype) -> torch.Tensor:
        if dtype not in self._norms:
            weight = self.reader.get(families.settings(self.config).final_norm)
            self._norms[dtype] = weight.to(device=self.device, dtype=self.dtype).to(dtype)
        return self._norms[dtype]

    def head(self, hidden: torch.Tensor, linear=F.linear) -> torch.Tensor:
        return self.heads([hidden], linear)[0]

    def heads(self, hiddens: list[torch.Tensor], linear=F.linear, out_dtype=None) -> list[torch.Tensor]:
        """Every lane's LM-head product with one read of the head (row blocks, sweep.blocked_heads)."""
        name = EMBED if self.config.tie_word_embeddings else HEAD
        # rows cast to the engine dtype first, then to each lane's: what the resident engine (and shadows) hold
        read = lambda a, b: self.reader.rows(name, a, b).to(device=self.device, dtype=self.dtype)   # noqa: E731
        out = blocked_heads(hiddens, read, self.config.vocab_size, linear, self.head_block_bytes, out_dtype)
        self.reader.drop_all()             # block edges and readahead: pages outside the blocks' whole pages
        return out

    def run_lanes(self, lanes: list[Lane], linear=F.linear) -> None:
        """One pass over the weights advancing every lane (this rank's layers only in a pipeline)."""
        self.passes += 1
        try:
            if self.pipeline is not None:
                self.pipeline.run(self, lanes, linear)
            else:
                run_layers(self, self.config, self.windows, lanes, linear)
        finally:
            if self.ahead is not None:      # a pass that stopped early leaves no reads queued
                self.ahead.clear()

    @contextmanager
    def scratch(self, count: int = 1):
        """CoreEngine.scratch; once no sequence is left, the KV pools' pages go back to the OS (a streaming run
        is one that counts its memory: a long probe's K/V should not stay resident under the next check)."""
        with super().scratch(count) as seqs:
            yield seqs
        self.cache.release_pages()

    # ---- CoreEngine hooks: a step is one pass --------------------------------------------------------
    def _forward(self, weights, tokens: torch.Tensor, meta: StepMetadata, capture, linear) -> torch.Tensor:
        cos, sin = self.rope.lookup(meta.positions, check=False, ends=meta.ends)
        h = emit_capture(capture, -1, "embed", self.embed(tokens, self.dtype))
        lane = Lane(h, self.cache, meta, cos, sin, capture, self.dtype)
        self.run_lanes([lane], linear)
        n = self.config.num_hidden_layers
        return emit_capture(capture, n, "final_norm", norm(lane.h, self.norm(self.dtype), self.config))

    def _head(self, hidden, weights, linear) -> torch.Tensor:
        return self.head(hidden, linear)

    def _weights_for_decode(self):
        return self.weights                  # nothing to pack: decode_linear runs on each loaded layer as is
