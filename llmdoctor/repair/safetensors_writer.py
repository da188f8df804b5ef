"""Write a safetensors file tensor by tensor: unchanged tensors are copied as raw byte ranges from their source
file, replaced tensors come from memory. Memory stays at one copy buffer plus the replaced tensors, so a 14 GB
checkpoint can be rewritten on a laptop (safetensors' save_file needs every tensor in RAM at once)."""
from __future__ import annotations

import ctypes
import json
import math
from pathlib import Path

import torch

from reference_engine.files.reads import SAFETENSORS_DTYPES

COPY_CHUNK = 64 << 20
# torch dtype -> safetensors dtype name: the reader's table, inverted
DTYPE_NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def write_safetensors(out: Path, entries: list[tuple[str, object]], metadata: dict[str, str] | None = None) -> int:
    """Write `out` from (name, source) pairs, where source is a torch.Tensor or a TensorInfo (a byte range of
    an existing file with .dtype, .shape, .file, .offset, .nbytes). Returns the data size in bytes."""
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, source in entries:
        dtype, shape, nbytes = _describe(source)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8-byte alignment with spaces
    with open(out, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for _, source in entries:
            _write_data(f, source)
    return offset


def _describe(source) -> tuple[str, tuple[int, ...], int]:
    if isinstance(source, torch.Tensor):
        return DTYPE_NAMES[source.dtype], tuple(source.shape), source.numel() * source.element_size()
    nbytes = source.nbytes or math.prod(source.shape) * DTYPE_BYTES[source.dtype]
    return source.dtype, tuple(source.shape), nbytes


def _write_data(f, source) -> None:
    if isinstance(source, torch.Tensor):
        # little-endian raw bytes, as safetensors stores them (every platform torch runs LLMs on is LE)
        data = source.detach().cpu().contiguous()
        if data.numel() == 0:
            return
        # a view of the tensor's own memory: no copy, and no numpy (torch does not require it)
        f.write(memoryview((ctypes.c_char * (data.numel() * data.element_size())).from_address(data.data_ptr())))
        return
    with open(source.file, "rb") as src:
        src.seek(source.offset)
        left = source.nbytes
        while left:
            chunk = src.read(min(COPY_CHUNK, left))
            if not chunk:
                raise OSError(f"{source.file}: ended before tensor {source.name!r} was copied")
            f.write(chunk)
            left -= len(chunk)
