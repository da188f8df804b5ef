"""Broken copies of a GGUF for the endpoint competence tests: the metadata kept, the tensors rewired so the model
loads and serves but talks nonsense. Cached under ~/.cache/llmdoctor/ (tests/assets.py cached_dir).

- `layers-reversed`: every blk.i.* tensor stored as blk.(L-1-i).* (a converter that numbered the layers backwards).
- `embeddings-shuffled`: the rows of token_embd.weight permuted with a fixed seed (a vocabulary/embedding mix-up;
  SmolLM2 ties its output head to it, so both ends are wrong).
"""
from __future__ import annotations

import re
from pathlib import Path

from tests.assets import AssetError, cached_dir

FAULTS = ("layers-reversed", "embeddings-shuffled")
BLOCK = re.compile(r"^blk\.(\d+)\.")


def broken_gguf(source: Path, fault: str) -> Path:
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    out_name = f"{source.stem}-{fault}.gguf"
    d = cached_dir(f"endpoint-broken-v1-{source.stem}-{fault}", lambda tmp: _write(source, fault, tmp / out_name))
    return d / out_name


def _write(source: Path, fault: str, out: Path) -> None:
    try:
        import numpy as np
        from gguf import GGUFReader, GGUFValueType, GGUFWriter
        reader = GGUFReader(source)
        arch = reader.fields["general.architecture"].contents()
        layers = int(reader.fields[f"{arch}.block_count"].contents())
        writer = GGUFWriter(out, arch=arch, endianess=reader.endianess)
        for field in reader.fields.values():
            if field.name.startswith("GGUF.") or field.name == "general.architecture":
                continue
            vtype = field.types[0]
            sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub_type)
        tensors = []
        for t in reader.tensors:
            name, data = t.name, t.data
            if fault == "layers-reversed" and BLOCK.match(name):
                i = int(BLOCK.match(name).group(1))
                name = BLOCK.sub(f"blk.{layers - 1 - i}.", name)
            if fault == "embeddings-shuffled" and name == "token_embd.weight":
                rows = np.random.default_rng(34).permutation(data.shape[0])     # whole rows: any quant type
                data = np.ascontiguousarray(data[rows])
            tensors.append((name, data, t.tensor_type))
        for name, data, qtype in sorted(tensors, key=lambda x: x[0]):
            writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, data, _ in sorted(tensors, key=lambda x: x[0]):
            writer.write_tensor_data(data)
        writer.close()
    except AssetError:
        raise
    except Exception as e:
        raise AssetError(f"building the {fault} copy of {source.name} failed: {type(e).__name__}: {e}") from e
