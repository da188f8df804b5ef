"""Our own safetensors header parser and integrity validator.

A safetensors file is: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON (an object mapping tensor
names to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional "__metadata__" object of
string -> string), then the data region. Offsets are relative to the data region. The format's rules,
all checked here before any tensor byte is touched:

- N <= 100,000,000 (the reference implementation's bound) and 8 + N <= file size;
- the header is UTF-8, valid JSON, an object, without duplicate keys;
- dtypes are known, shapes are lists of non-negative integers, offsets are two integers begin <= end;
- no integer overflow: every size fits in an unsigned 64-bit integer;
- end - begin == prod(shape) * itemsize;
- sorted by offset, the spans tile the data region from 0 without gaps or overlaps and cover it exactly,
  so 8 + N + (last end) == file size.

Only the first 8 + N bytes are ever read, so a hostile header cannot trigger a huge allocation and a
truncated or sparse multi-GB file is checked in microseconds.
"""
from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from reference_engine.errors import ModelDirError

MAX_HEADER_BYTES = 100_000_000
U64_MAX = 2**64 - 1
METADATA_KEY = "__metadata__"
# dtype -> size of one element in bits (the F4/F6 formats pack several elements per byte)
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # byte offset in the data region
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Header:
    path: Path
    header_len: int  # N, the JSON header's length in bytes
    file_size: int
    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def data_start(self) -> int:
        """Absolute file offset of the data region."""
        return 8 + self.header_len


def read_header(path: str | Path) -> Header:
    """Parse and fully validate a safetensors header; raise ModelDirError(file, first problem) if bad."""
    header, problems = inspect_file(path)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ModelDirError(path, problems[0] + more)
    return header


def validate_file(path: str | Path) -> list[str]:
    """Every problem found in the file (without the path prefix); [] when valid. Never raises."""
    try:
        return inspect_file(path)[1]
    except Exception as e:  # belt and braces: a validator must not crash on any input
        return [f"cannot validate: {type(e).__name__}: {e}"]


def inspect_file(path: str | Path) -> tuple[Header | None, list[str]]:
    """(header, problems): the parsed header (None when unparseable) and every problem found."""
    path = Path(path)
    try:
        raw, file_size = _read_header_bytes(path)
    except _Invalid as e:
        return None, [str(e)]
    header = Header(path, len(raw), file_size)
    try:
        obj = _parse_json(raw)
    except _Invalid as e:
        return None, [str(e)]
    problems: list[str] = []
    header.metadata = _parse_metadata(obj.pop(METADATA_KEY, None), problems)
    for name, entry in obj.items():
        tensor = _parse_entry(name, entry, problems)
        if tensor is not None:
            header.tensors[name] = tensor
    # coverage is only meaningful when every entry was understood; otherwise it repeats the first problem
    problems += _layout_problems(header, check_coverage=len(header.tensors) == len(obj))
    return header, problems


class _Invalid(Exception):
    pass


def _read_header_bytes(path: Path) -> tuple[bytes, int]:
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise _Invalid(f"file is {file_size} bytes, too short for the 8-byte header length")
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise _Invalid(f"declared header length {n} bytes exceeds the limit of {MAX_HEADER_BYTES}")
            if n > file_size - 8:
                raise _Invalid(f"declared header length {n} bytes but only {file_size - 8} bytes follow "
                               f"(file truncated?)")
            if n < 2:
                raise _Invalid(f"declared header length {n} bytes is too short for a JSON object")
            raw = f.read(n)
    except OSError as e:
        raise _Invalid(f"cannot read: {e.strerror or e}") from None
    if len(raw) != n:
        raise _Invalid(f"file shrank while reading: expected {n} header bytes, got {len(raw)}")
    return raw, file_size


def _parse_json(raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Invalid(f"header is not UTF-8 ({e.reason} at header byte {e.start})") from None
    if not text.startswith("{"):
        raise _Invalid(f"header does not start with '{{' (starts with {text[:10]!r})")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Invalid:
        raise
    except RecursionError:
        raise _Invalid("header is not valid JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, or an integer literal too long to convert
        msg = f"{e.msg} at header byte {e.pos}" if isinstance(e, json.JSONDecodeError) else str(e)
        raise _Invalid(f"header is not valid JSON: {msg}") from None
    if not isinstance(obj, dict):
        raise _Invalid(f"header JSON is a {type(obj).__name__}, not an object")
    return obj


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Invalid(f"header has duplicate key {key!r}")
        out[key] = value
    return out


def _parse_metadata(meta: object, problems: list[str]) -> dict[str, str]:
    if meta is None:  # absent or null: no metadata
        return {}
    if not isinstance(meta, dict):
        problems.append(f"'{METADATA_KEY}' must be an object of strings, found {type(meta).__name__}")
        return {}
    bad = [k for k, v in meta.items() if not isinstance(v, str)]
    for key in bad:
        problems.append(f"'{METADATA_KEY}' value of {key!r} must be a string, found {type(meta[key]).__name__}")
    return {k: v for k, v in meta.items() if isinstance(v, str)}


def _is_u64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64_MAX


def _parse_entry(name: str, entry: object, problems: list[str]) -> TensorEntry | None:
    where = f"tensor {name!r}"
    if not isinstance(entry, dict):
        problems.append(f"{where}: entry must be an object, found {type(entry).__name__}")
        return None
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in entry]
    if missing:
        problems.append(f"{where}: missing {', '.join(missing)}")
        return None
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        problems.append(f"{where}: unknown dtype {dtype!r}")
        return None
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        problems.append(f"{where}: shape must be a list of non-negative integers, found {shape!r:.80}")
        return None
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_u64(o) for o in offsets)):
        problems.append(f"{where}: data_offsets must be two non-negative integers, found {offsets!r:.80}")
        return None
    start, end = offsets
    if start > end:
        problems.append(f"{where}: data_offsets begin {start} > end {end}")
        return None
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits > U64_MAX:
        problems.append(f"{where}: shape {shape} x {dtype} overflows 64-bit size")
        return None
    if bits % 8:
        problems.append(f"{where}: shape {shape} x {dtype} is {bits} bits, not a whole number of bytes")
        return None
    if end - start != bits // 8:
        problems.append(f"{where}: byte span {end - start} (offsets {start}..{end}) does not match "
                        f"shape {shape} x {dtype} = {bits // 8} bytes")
        return None
    return TensorEntry(name, dtype, tuple(shape), start, end)


def _layout_problems(header: Header, check_coverage: bool = True) -> list[str]:
    """Spans must tile [0, data size) contiguously: sorted by offset, each begins where the last ended."""
    problems: list[str] = []
    data_size = header.file_size - header.data_start
    position, previous = 0, None
    for t in sorted(header.tensors.values(), key=lambda t: (t.start, t.end)):
        if t.start > position:
            problems.append(f"tensor {t.name!r}: gap of {t.start - position} bytes before it "
                            f"(data offsets {position}..{t.start} belong to no tensor)")
        elif t.start < position:
            problems.append(f"tensor {t.name!r}: data offsets {t.start}..{t.end} overlap tensor "
                            f"{previous!r} (which ends at {position})")
        if t.end > data_size:
            problems.append(f"tensor {t.name!r}: data offsets {t.start}..{t.end} run past the end of the "
                            f"data region ({data_size} bytes; file truncated?)")
        if t.end >= position:
            position, previous = t.end, t.name
    if check_coverage and position < data_size and not any("past the end" in p for p in problems):
        problems.append(f"data region is {data_size} bytes but tensors cover only {position} "
                        f"({data_size - position} trailing bytes belong to no tensor)")
    return problems
