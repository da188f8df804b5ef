"""Quantize an F32/F16 GGUF to Q8_0 or Q4_0 with the `gguf` package's reference quantizers (gguf.quants), for
measuring `llmdoctor diff` without building llama.cpp's llama-quantize.

    python3 scripts/quantize_gguf.py model-f32.gguf model-q8_0.gguf Q8_0

Every 2-D tensor whose rows divide into 32-value blocks is quantized (llama-quantize's --pure: token_embd too,
no Q6_K output layer); 1-D tensors (norms, biases) stay F32. Metadata is copied unchanged except
general.file_type. A tool for tests and benchmarks: it uses numpy through gguf, which the package never does.
"""
from __future__ import annotations

import sys

import gguf
import numpy as np

FILE_TYPES = {"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}


def copy_metadata(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, file_type: int) -> None:
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue   # written by GGUFWriter itself
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(file_type)
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)


def quantize(src: str, dst: str, qtype_name: str) -> None:
    qtype = gguf.GGMLQuantizationType[qtype_name]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch)
    copy_metadata(reader, writer, FILE_TYPES[qtype_name])
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            raise SystemExit(f"{t.name}: source must be F32/F16, found {t.tensor_type.name}")
        data = data.astype(np.float32)
        if data.ndim == 2 and data.shape[-1] % block == 0:
            writer.add_tensor(t.name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in FILE_TYPES:
        raise SystemExit("usage: quantize_gguf.py SRC.gguf DST.gguf Q8_0|Q4_0")
    quantize(*sys.argv[1:])
