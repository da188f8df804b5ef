"""Our own GGUF header parser and validator: bounded reads over a read-only memory map.

A GGUF file is: magic "GGUF", version (u32), tensor count (u64), metadata count (u64), the metadata
key/value pairs, the tensor infos (name, dims, ggml type, offset), padding to `general.alignment`, then
the tensor data. Every count, length and offset below is checked against the bytes actually left in the
file before anything is allocated, so a truncated or hostile file is a one-line ModelDirError, never a
huge allocation or a crash. `gguf` (llama.cpp's own package) is used for what it is best at: the
dequantization kernels of every quant type (`dequantize_tensor`, in gguf_tensors.py); its reader trusts
the header, ours does not.
"""
from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from reference_engine.errors import ModelDirError, UnsupportedError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4                       # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 48             # per tensor; anything larger is a corrupt header, not a model
MAX_NESTING = 2                    # arrays of arrays exist in the spec; deeper nesting is hostile

# GGUF value types -> (struct format, byte size); 8 = string, 9 = array
SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
           6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
STRING, ARRAY = 8, 9
TYPE_NAMES = {0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32",
              7: "BOOL", 8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64"}

@functools.cache
def ggml_types() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, block size in elements, block size in bytes), from gguf's own GGML_QUANT_SIZES: the
    table llama.cpp's Python package keeps beside the kernels that dequantize those blocks, so a size here can never
    disagree with the bytes the kernel reads. Imported on first use: the gguf package loads numpy, which a
    safetensors run never needs."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    return {int(kind): (kind.name, *GGML_QUANT_SIZES[kind]) for kind in GGMLQuantizationType
            if kind in GGML_QUANT_SIZES}


def __getattr__(name: str):
    # GGML_TYPES as a module attribute, built only when someone asks for it (see ggml_types)
    if name == "GGML_TYPES":
        return ggml_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    dims: tuple[int, ...]          # ggml order: dims[0] is the innermost (row length)
    ggml_type: int
    offset: int                    # absolute byte offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return ggml_types()[self.ggml_type][0]

    @property
    def shape(self) -> tuple[int, ...]:
        """torch / Hugging Face order (outermost first)."""
        return tuple(reversed(self.dims))

    @property
    def numel(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass
class GGUFFile:
    path: Path
    version: int
    metadata: dict[str, object]                    # key -> int | float | bool | str | list
    value_types: dict[str, tuple[int, int | None]]  # key -> (GGUF type, array item type or None)
    tensors: dict[str, GGUFTensor]
    alignment: int
    data_start: int
    file_size: int
    bad_utf8: list[str] = field(default_factory=list)  # keys whose key or string value is not valid UTF-8
    _map: mmap.mmap | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str | Path) -> "GGUFFile":
        path = Path(path)
        if not path.is_file():
            raise ModelDirError(path, "GGUF file not found")
        try:
            with open(path, "rb") as f:
                size = path.stat().st_size
                if size < 24:
                    raise ModelDirError(path, f"file is {size} bytes, too short for a GGUF header")
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # copy-on-write: never writes the file
        except OSError as e:
            raise ModelDirError(path, f"cannot read: {e.strerror or e}") from None
        parsed = _Parser(mm, path).parse()
        parsed._map = mm
        return parsed

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def tensor_bytes(self, tensor: GGUFTensor):
        """A uint8 torch view of the tensor's bytes in the memory map (no copy)."""
        import torch
        return torch.frombuffer(self._map, dtype=torch.uint8, count=tensor.nbytes, offset=tensor.offset)


class _Parser:
    def __init__(self, mm: mmap.mmap, path: Path):
        self.mm, self.path, self.pos, self.size = mm, path, 0, len(mm)
        self.bad_utf8: list[str] = []
        self.current_key = ""

    def fail(self, problem: str) -> ModelDirError:
        return ModelDirError(self.path, f"invalid GGUF: {problem}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"truncated: {what} needs {n} bytes at offset {self.pos}, "
                            f"only {self.size - self.pos} left")

    def unpack(self, fmt: str, n: int, what: str):
        self.need(n, what)
        value = struct.unpack_from(fmt, self.mm, self.pos)[0]
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.unpack("<Q", 8, f"{what} length")
        self.need(n, f"{what} ({n} bytes)")
        raw = self.mm[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.bad_utf8.append(self.current_key or what)
            return raw.decode("utf-8", errors="replace")

    def parse(self) -> GGUFFile:
        magic = self.mm[:4]
        if magic != MAGIC:
            raise ModelDirError(self.path, f"not a GGUF file (magic {bytes(magic)!r}, expected b'GGUF')")
        self.pos = 4
        version = self.unpack("<I", 4, "version")
        if version not in SUPPORTED_VERSIONS:
            swapped = struct.unpack(">I", struct.pack("<I", version))[0]
            if swapped in SUPPORTED_VERSIONS:
                raise UnsupportedError(self.path, "big-endian GGUF files are not supported")
            raise UnsupportedError(self.path, f"GGUF version {version} (supported: 2, 3)")
        n_tensors = self.unpack("<Q", 8, "tensor count")
        n_kv = self.unpack("<Q", 8, "metadata count")
        # a key/value needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8+4+8+4+8
        if n_kv * 13 > self.size - self.pos:
            raise self.fail(f"metadata count {n_kv} cannot fit in a {self.size}-byte file")
        if n_tensors * 32 > self.size - self.pos:
            raise self.fail(f"tensor count {n_tensors} cannot fit in a {self.size}-byte file")
        metadata, types = {}, {}
        for i in range(n_kv):
            self.current_key = ""
            key = self.string(f"metadata key #{i}")
            self.current_key = key
            if key in metadata:
                raise self.fail(f"duplicate metadata key {key!r}")
            kind = self.unpack("<I", 4, f"type of {key!r}")
            value, sub = self.value(kind, key, 0)
            metadata[key], types[key] = value, (kind, sub)
        self.current_key = ""
        alignment = self.alignment(metadata, types)
        infos = [self.tensor_info(i) for i in range(n_tensors)]
        data_start = -(-self.pos // alignment) * alignment
        tensors = self.place(infos, data_start, alignment)
        return GGUFFile(self.path, version, metadata, types, tensors, alignment, data_start, self.size,
                        list(dict.fromkeys(self.bad_utf8)))

    def value(self, kind: int, key: str, depth: int):
        if kind in SCALARS:
            fmt, n = SCALARS[kind]
            return self.unpack(fmt, n, f"value of {key!r}"), None
        if kind == STRING:
            return self.string(f"value of {key!r}"), None
        if kind == ARRAY:
            if depth >= MAX_NESTING:
                raise self.fail(f"{key!r}: arrays nested deeper than {MAX_NESTING}")
            sub = self.unpack("<I", 4, f"item type of {key!r}")
            count = self.unpack("<Q", 8, f"item count of {key!r}")
            item_min = SCALARS[sub][1] if sub in SCALARS else 8 if sub in (STRING, ARRAY) else None
            if item_min is None:
                raise self.fail(f"{key!r}: unknown array item type {sub}")
            if count * item_min > self.size - self.pos:
                raise self.fail(f"{key!r}: array of {count} items cannot fit in the {self.size - self.pos} "
                                f"bytes left")
            if sub in SCALARS:
                fmt, n = SCALARS[sub]
                self.need(count * n, f"items of {key!r}")
                items = list(struct.unpack_from(f"<{count}{fmt[1]}", self.mm, self.pos))
                self.pos += count * n
                return items, sub
            return [self.value(sub, key, depth + 1)[0] for _ in range(count)], sub
        raise self.fail(f"{key!r}: unknown value type {kind}")

    def alignment(self, metadata: dict, types: dict) -> int:
        if "general.alignment" not in metadata:
            return DEFAULT_ALIGNMENT
        value = metadata["general.alignment"]
        if types["general.alignment"][0] != 4 or value == 0 or value & (value - 1):
            raise self.fail(f"general.alignment must be a power-of-two UINT32, found {value!r}")
        return value

    def tensor_info(self, i: int) -> tuple[str, tuple[int, ...], int, int]:
        self.current_key = ""
        name = self.string(f"tensor #{i} name")
        n_dims = self.unpack("<I", 4, f"dimension count of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"tensor {name!r} has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
        dims = tuple(self.unpack("<Q", 8, f"dims of {name!r}") for _ in range(n_dims))
        ggml_type = self.unpack("<I", 4, f"type of tensor {name!r}")
        offset = self.unpack("<Q", 8, f"offset of tensor {name!r}")
        return name, dims, ggml_type, offset

    def place(self, infos, data_start: int, alignment: int) -> dict[str, GGUFTensor]:
        """Check each tensor's type, size, alignment and extent inside the file; no two may overlap."""
        tensors: dict[str, GGUFTensor] = {}
        for name, dims, ggml_type, offset in infos:
            if name in tensors:
                raise self.fail(f"duplicate tensor name {name!r}")
            if ggml_type not in ggml_types():
                raise UnsupportedError(self.path, f"tensor {name!r} has unknown ggml type {ggml_type}")
            type_name, block, block_bytes = ggml_types()[ggml_type]
            numel = 1
            for d in dims:
                numel *= d
            if numel > MAX_ELEMENTS:
                raise self.fail(f"tensor {name!r} claims {numel} elements")
            if dims[0] % block:
                raise self.fail(f"tensor {name!r}: row length {dims[0]} is not a multiple of the {type_name} "
                                f"block size {block}")
            if offset % alignment:
                raise self.fail(f"tensor {name!r}: offset {offset} is not a multiple of the alignment {alignment}")
            nbytes = numel // block * block_bytes
            start = data_start + offset
            if start + nbytes > self.size:
                raise self.fail(f"tensor {name!r} ({nbytes} bytes at offset {start}) extends past the end of "
                                f"the {self.size}-byte file (truncated?)")
            tensors[name] = GGUFTensor(name, dims, ggml_type, start, nbytes)
        ordered = sorted(tensors.values(), key=lambda t: t.offset)
        for a, b in zip(ordered, ordered[1:]):
            if a.offset + a.nbytes > b.offset:
                raise self.fail(f"tensors {a.name!r} and {b.name!r} overlap")
        return tensors


def find_gguf(path: str | Path) -> Path | None:
    """The GGUF file a model path designates, or None for a Hugging Face directory."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix.lower() == ".gguf" or _has_magic(path) else None
    if not path.is_dir() or (path / "config.json").exists():
        return None
    found = sorted(p for p in path.glob("*.gguf") if p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:3])
        raise ModelDirError(path, f"holds {len(found)} GGUF files ({names}); pass the one to use")
    return found[0] if found else None


def _has_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False
