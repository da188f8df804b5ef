"""A GGUF copied with metadata keys and tensors changed, as one edits a file with gguf-py (F32/F16 tensors only:
the tiny conversions the incident tests make are F32)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from tests.checks.zoo_gguf import DROP, F32, GGUFSpec, write_spec

PLAIN = (GGMLQuantizationType.F32, GGMLQuantizationType.F16)


def edited_gguf(src: Path, dst: Path, metadata: dict | None = None, tensors: dict | None = None,
                keep_tensors: bool = True) -> Path:
    """A copy of src at dst with metadata keys replaced (a value, or (value, type, subtype)), tensors replaced by
    arrays, and either removed by DROP; keep_tensors=False copies the metadata alone (a tokenizer-only file)."""
    from reference_engine.files.gguf_file import GGUFFile
    g = GGUFFile.open(src)
    meta = {}
    for key, value in g.metadata.items():
        if key != "general.architecture":
            kind, sub = g.value_types[key]
            meta[key] = (value, GGUFValueType(kind), None if sub is None else GGUFValueType(sub))
    for key, value in (metadata or {}).items():
        meta.pop(key, None) if value is DROP else meta.__setitem__(key, value)
    arrays = {}
    for name, t in (g.tensors if keep_tensors else {}).items():
        if t.ggml_type not in PLAIN:
            raise ValueError(f"{src.name}: tensor {name} is type {t.ggml_type}, edited_gguf copies F32/F16 only")
        dtype = np.float32 if t.ggml_type == GGMLQuantizationType.F32 else np.float16
        data = np.frombuffer(g.tensor_bytes(t).numpy().tobytes(), dtype=dtype).reshape(t.shape)
        arrays[name] = (data.astype(np.float32), F32)
    for name, value in (tensors or {}).items():
        arrays.pop(name, None) if value is DROP else arrays.__setitem__(name, (np.asarray(value, np.float32), F32))
    dst.parent.mkdir(parents=True, exist_ok=True)
    return write_spec(GGUFSpec(g.metadata["general.architecture"], meta, arrays), dst)
