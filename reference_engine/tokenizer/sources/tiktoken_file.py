"""Read tiktoken-format vocabularies, for comparing them with tokenizer.json (never to run them):

- a tiktoken BPE file (Llama 3's original `tokenizer.model`, OpenAI's `*.tiktoken`): one "base64(token bytes)
  rank" per line; the rank is the token id and the merge priority;
- Mistral's `tekken.json`: {"config": {pattern, num_vocab_tokens, default_vocab_size,
  default_num_special_tokens}, "vocab": [{rank, token_bytes (base64), token_str}], "special_tokens": [{rank,
  token_str, is_control}]}. As mistral-common's Tekkenizer reads it, the special tokens take ids
  0..num_special-1 and a vocab entry of rank r has id r + num_special, keeping only the first
  default_vocab_size - num_special ranks.
Both readers are bounded (file size, line count, base64 and rank validity) and fail with one ModelDirError line.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from reference_engine.errors import ModelDirError
from reference_engine.limits import MAX_TOKENIZER_VOCAB

MAX_FILE_BYTES = 1 << 27            # 128 MiB; cl100k is 1.7 MB, o200k 3.6 MB, tekken.json ~20 MB
TIKTOKEN_LINE = re.compile(rb"^[A-Za-z0-9+/]+={0,2} \d+\r?$")
# mistral-common's names for the special tokens of a tekken.json that lists none (Tekkenizer.DEPRECATED_...)
DEFAULT_TEKKEN_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                           "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
                           "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                           "[TOOL_CONTENT]")


@dataclass
class TiktokenVocab:
    """id -> token bytes, as a tiktoken-style file defines them."""
    path: str
    tokens: dict[int, bytes]                              # id -> bytes (regular tokens)
    specials: dict[int, str] = field(default_factory=dict)   # id -> text (tekken special tokens)
    pattern: str | None = None                            # tekken's pre-tokenizer regex
    version: str | None = None


def looks_like_tiktoken(path: str | Path) -> bool:
    """Whether a file starts like a tiktoken BPE file (its first line is "base64 rank")."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    first = head.split(b"\n", 1)[0]
    return bool(TIKTOKEN_LINE.match(first))


def _read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ModelDirError(path, f"{size} bytes is beyond any tokenizer vocabulary file (limit {MAX_FILE_BYTES})")
        return path.read_bytes()
    except OSError as e:
        raise ModelDirError(path, f"cannot read: {e.strerror or e}") from None


def read_tiktoken(path: str | Path) -> TiktokenVocab:
    """Parse a tiktoken BPE file; a line that is not "base64 rank", a repeated rank or token is an error."""
    path = Path(path)
    tokens: dict[int, bytes] = {}
    seen: dict[bytes, int] = {}
    for number, line in enumerate(_read(path).splitlines(), 1):
        if not line.strip():
            continue
        if len(tokens) >= MAX_TOKENIZER_VOCAB:
            raise ModelDirError(path, f"more than {MAX_TOKENIZER_VOCAB} tokens")
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise ModelDirError(path, f"line {number} is not 'base64-token rank': {line[:60]!r}")
        try:
            token = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raise ModelDirError(path, f"line {number}: {parts[0][:40]!r} is not base64") from None
        rank = int(parts[1])
        if rank in tokens or token in seen:
            raise ModelDirError(path, f"line {number}: rank {rank} or token {token!r} appears twice")
        tokens[rank] = token
        seen[token] = rank
    if not tokens:
        raise ModelDirError(path, "no tokens (not a tiktoken file)")
    return TiktokenVocab(str(path), tokens)


def read_tekken(path: str | Path) -> TiktokenVocab:
    """Parse tekken.json into final ids (special tokens first), as mistral-common's Tekkenizer numbers them."""
    path = Path(path)
    try:
        raw = json.loads(_read(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(path, f"not valid JSON: {e}") from None
    config = raw.get("config") if isinstance(raw, dict) else None
    vocab = raw.get("vocab") if isinstance(raw, dict) else None
    if not isinstance(config, dict) or not isinstance(vocab, list):
        raise ModelDirError(path, "no 'config' object or 'vocab' list (not a tekken.json)")
    specials = raw.get("special_tokens")
    if specials is None:
        specials = [{"rank": i, "token_str": t} for i, t in enumerate(DEFAULT_TEKKEN_SPECIALS)]
    num_special = _int(config, "default_num_special_tokens", path, len(specials))
    vocab_size = _int(config, "default_vocab_size", path, len(vocab) + num_special)
    inner = vocab_size - num_special
    if not isinstance(specials, list) or len(specials) > num_special or inner < 0 or inner > len(vocab):
        raise ModelDirError(path, f"config says {vocab_size} tokens with {num_special} special ones, but it lists "
                                  f"{len(vocab)} vocab entries and {len(specials) if isinstance(specials, list) else 0}"
                                  " special tokens")
    out = TiktokenVocab(str(path), {}, pattern=config.get("pattern"), version=config.get("version"))
    for i, entry in enumerate(specials):
        if not isinstance(entry, dict) or not isinstance(entry.get("token_str"), str):
            raise ModelDirError(path, f"special_tokens[{i}] has no token_str")
        out.specials[i] = entry["token_str"]
    for i in range(len(specials), num_special):   # mistral-common's fillers
        out.specials[i] = f"<SPECIAL_{i}>"
    for entry in vocab[:inner]:
        rank = entry.get("rank") if isinstance(entry, dict) else None
        if not isinstance(rank, int) or not 0 <= rank < inner or rank + num_special in out.tokens:
            raise ModelDirError(path, f"vocab entry {entry!r:.80} has a missing, repeated or out-of-range rank")
        try:
            out.tokens[rank + num_special] = base64.b64decode(entry.get("token_bytes", ""), validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise ModelDirError(path, f"vocab rank {rank}: token_bytes is not base64") from None
    return out


def _int(config: dict, key: str, path: Path, default: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKENIZER_VOCAB:
        raise ModelDirError(path, f"config.{key} = {value!r} is not a token count")
    return value
