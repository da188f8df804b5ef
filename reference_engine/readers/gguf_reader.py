"""Stream a GGUF file's weights under a memory budget: read one tensor's quantized bytes, dequantize, let go.

The streaming core (streaming.py) asks its reader for a layer's tensors by Hugging Face name (`in`, `info`,
`get`), for the embedding rows of a step (`gather_rows`) and for the LM head block by block (`rows`). Over a
GGUF file this reader gives what GGUFWeights.get gives (float32, Q/K permutation undone, norm offset removed:
GGUFWeights.hf_layout does both, for both readers), so the streaming logits equal the resident GGUF engine's.

What it does differently is the memory: the quantized bytes are read with pread at the offsets the GGUF
validator checked (ChunkedWeights._read_bytes, then posix_fadvise DONTNEED: no memory-mapped page stays
charged), and dequantized a few rows at a time into one float32 tensor, so gguf's numpy kernels never hold
more than DEQUANT_CHUNK_BYTES of scratch. Rows of a 2-D tensor are whole quantization blocks (a row of ne0
values is ne0 / block_size blocks of type_size bytes, gguf.constants.GGML_QUANT_SIZES), so the embedding
rows of a step and each LM-head block are read and dequantized alone: no [vocab, hidden] float32 copy.
"""
from __future__ import annotations

import numpy as np
import torch

from reference_engine.readers.layer_reader import ChunkedWeights
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.gguf_arch import is_norm
from reference_engine.files.gguf_file import GGUFTensor, ggml_types
from reference_engine.files.gguf_mxfp4 import TORCH_KERNELS
from reference_engine.files.reads import drop_cached, read_range
from reference_engine.files.gguf_weights import TORCH_TYPES, GGUFWeights

DEQUANT_CHUNK_BYTES = 16 << 20     # float32 output per call of gguf's numpy kernels (their scratch is ~1x it)
BLOCK_ELEMENTS = 1 << 22           # values per block of a whole-tensor sweep (16 MiB of float32)


def row_bytes(tensor: GGUFTensor) -> int:
    """Bytes of one row (dims[0] values): whole blocks of the tensor's quantization type."""
    _, block, type_size = ggml_types()[tensor.ggml_type]
    return tensor.dims[0] // block * type_size


def dequantize_rows(raw: torch.Tensor, tensor: GGUFTensor, n_rows: int, path) -> torch.Tensor:
    """raw: uint8 [n_rows * row_bytes] -> [n_rows, dims[0]] float32 (ints keep their type), chunk by chunk."""
    cols, kind = tensor.dims[0], tensor.type_name
    if kind in TORCH_TYPES:
        out = raw.view(TORCH_TYPES[kind]).reshape(n_rows, cols)
        return out.float() if out.is_floating_point() else out
    if kind in TORCH_KERNELS:                                            # ours, in torch (MXFP4)
        try:
            return TORCH_KERNELS[kind](raw.reshape(n_rows, -1), cols)
        except ValueError as e:
            raise ModelDirError(path, f"tensor {tensor.name!r}: cannot dequantize: {e}") from None
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize
    rows = raw.numpy().reshape(n_rows, -1)                               # [n_rows, row bytes]
    out = torch.empty(n_rows, cols, dtype=torch.float32)                 # [n_rows, cols]
    step = max(1, DEQUANT_CHUNK_BYTES // (4 * cols))
    try:
        qtype = GGMLQuantizationType(tensor.ggml_type)
        for a in range(0, n_rows, step):
            b = min(n_rows, a + step)
            out[a:b] = torch.from_numpy(np.asarray(gguf_dequantize(rows[a:b], qtype), dtype=np.float32))
    except NotImplementedError:
        raise UnsupportedError(path, f"tensor {tensor.name!r}: gguf cannot dequantize {kind}") from None
    except (ValueError, RuntimeError) as e:
        raise ModelDirError(path, f"tensor {tensor.name!r}: cannot dequantize: {e}") from None
    return out


def stored_rows(fd: int, path, tensor: GGUFTensor, start: int, end: int) -> torch.Tensor:
    """Rows start..end-1 of a tensor as stored (a row: dims[0] values), [end - start, dims[0]] float32 (ints keep
    their type): only their bytes are read (pread at the validated offset, then the pages let go)."""
    size = row_bytes(tensor)
    raw = read_range(fd, tensor.offset + start * size, (end - start) * size, path, f"tensor {tensor.name!r}")
    return dequantize_rows(raw, tensor, end - start, path)


def row_blocks(fd: int, path, tensor: GGUFTensor, max_elements: int = BLOCK_ELEMENTS):
    """(first row, [rows, dims[0]] block) over a whole tensor as stored, at most max_elements values each: what
    a check that looks at every value holds at once, whatever the tensor's size (a 70B embedding is > 6 GB
    dequantized)."""
    rows, step = tensor.numel // tensor.dims[0], max(1, max_elements // tensor.dims[0])
    for start in range(0, rows, step):
        yield start, stored_rows(fd, path, tensor, start, min(rows, start + step))


class GGUFChunkedWeights(ChunkedWeights):
    """ChunkedWeights over a GGUFWeights (`self.weights`): `get` and `rows` return dequantized float32 in
    Hugging Face layout; `bytes_read` counts the quantized bytes actually read."""
    read_ahead = False           # its tensors are dequantized as read (a thread would hold their copies)

    def _tensor(self, name: str) -> GGUFTensor:
        return self.weights.stored_tensor(name)

    def get(self, name: str) -> torch.Tensor:
        """The whole tensor as GGUFWeights.get returns it (a fresh CPU tensor, no memory map behind it)."""
        if self.weights.composed(name):            # built from several tensors (Llama 4's fused experts)
            return self.weights.get(name)
        info, tensor = self.weights.info(name), self._tensor(name)
        raw = self._read_bytes(info, tensor.offset, tensor.nbytes)
        out = dequantize_rows(raw, tensor, tensor.numel // tensor.dims[0], info.file).reshape(tensor.shape)
        return self.weights.hf_layout(name, out)

    def rows(self, name: str, start: int, end: int) -> torch.Tensor:
        """Rows start..end-1 of a 2-D tensor, [end - start, cols] float32: only their blocks are read."""
        info, tensor = self.weights.info(name), self._tensor(name)
        if len(tensor.dims) != 2 or not 0 <= start <= end <= tensor.dims[1]:
            raise ValueError(f"rows {start}..{end} of {name!r} {list(tensor.shape)}")
        if _reorders(self.weights, name):
            raise ValueError(f"{name!r} is reordered after dequantizing; read it whole with get()")
        size = row_bytes(tensor)
        raw = self._read_bytes(info, tensor.offset + start * size, (end - start) * size)
        return dequantize_rows(raw, tensor, end - start, info.file)


    def stored(self, name: str) -> GGUFTensor:
        """The GGUF tensor behind a Hugging Face name (for stored_rows / row_blocks)."""
        return self._tensor(name)

    def reorders(self, name: str) -> bool:
        """Whether the stored rows are not the Hugging Face tensor's (Q/K permutation, Gemma's norm offset)."""
        return _reorders(self.weights, name)

    def stored_rows(self, name: str, start: int, end: int) -> torch.Tensor:
        info, tensor = self.weights.info(name), self._tensor(name)
        self.bytes_read += (end - start) * row_bytes(tensor)
        return stored_rows(self._files.fd(info.file), info.file, tensor, start, end)

    def drop_tensor(self, name: str) -> None:
        if self.drop_cache:
            info, tensor = self.weights.info(name), self._tensor(name)
            drop_cached(self._files.fd(info.file), tensor.offset, tensor.nbytes)


def _reorders(weights: GGUFWeights, name: str) -> bool:
    """Whether hf_layout changes this tensor (Q/K un-permutation, norm offset): its rows are not the file's."""
    return (weights.arch.permute_qk and name.endswith(("q_proj.weight", "k_proj.weight"))) or \
        bool(weights.arch.norm_offset and is_norm(name)) or \
        bool(weights.arch.touches is not None and weights.arch.touches(name))
