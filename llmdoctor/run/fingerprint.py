"""A model's fingerprint: sha256 over config.json and every safetensors header (never the tensor data), so
two reports can be matched to the same checkpoint in milliseconds, even for a 70B model."""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path

MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit


def fingerprint(model_dir: str | Path) -> str | None:
    """'sha256:<hex>' of config.json + safetensors headers; None when the directory has neither."""
    root = Path(model_dir)
    digest = hashlib.sha256()
    found = False
    config = root / "config.json"
    if config.is_file():
        digest.update(b"config.json\0" + _read_prefix(config, MAX_HEADER_BYTES))
        found = True
    for file in sorted(root.glob("*.safetensors")):
        digest.update(file.name.encode() + b"\0" + safetensors_header_bytes(file))
        found = True
    return f"sha256:{digest.hexdigest()}" if found else None


def safetensors_header_bytes(file: Path) -> bytes:
    """The 8-byte length prefix and the JSON header; whatever is readable for a damaged file."""
    try:
        with open(file, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return prefix
            (length,) = struct.unpack("<Q", prefix)
            return prefix + handle.read(min(length, MAX_HEADER_BYTES))
    except OSError:
        return b""


def _read_prefix(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""
