"""What a model's files say about the length it was trained or meant to run at, beside config.json's
max_position_embeddings: tokenizer_config.json model_max_length, generation_config.json max_length, and the
other length keys some configs carry (n_positions, seq_length, ...). CFG061 holds a declared length against
it (declared.py `unscaled_claim`); every source read is named in the finding, found or not."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reference_engine.config import read_json
from reference_engine.errors import ModelDirError

# tokenizers write VERY_LARGE_INTEGER (1e30) when they know no length, and generation_config's max_length
# defaults to 20: values outside this range say nothing about a training length
PLAUSIBLE = (256, 10_000_000)
CONFIG_KEYS = ("n_positions", "seq_length", "max_seq_len", "max_sequence_length", "model_max_length")
FILE_KEYS = (("tokenizer_config.json", "model_max_length"), ("generation_config.json", "max_length"))


@dataclass(frozen=True)
class LengthEvidence:
    source: str          # e.g. "tokenizer_config.json model_max_length"
    tokens: int


def _plausible(value) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and PLAUSIBLE[0] <= value <= PLAUSIBLE[1]
    return value if ok else None


def sources_read() -> list[str]:
    """Every place length_evidence looks, for a finding that says what was read."""
    return [f"{name} {key}" for name, key in FILE_KEYS] + [f"config.json {key}" for key in CONFIG_KEYS]


def length_evidence(model_dir: Path | None, raw: dict) -> list[LengthEvidence]:
    """The training-length statements in the files (model_dir None: a GGUF, whose context_length is the
    declared length itself: only the config's own keys)."""
    out = [LengthEvidence(f"config.json {key}", raw[key]) for key in CONFIG_KEYS if _plausible(raw.get(key))]
    for name, key in FILE_KEYS if model_dir is not None else ():
        path = Path(model_dir) / name
        try:
            data = read_json(path) if path.is_file() else {}
        except ModelDirError:        # an unreadable file is another check's finding (TOK, GEN)
            continue
        if _plausible(data.get(key)):
            out.append(LengthEvidence(f"{name} {key}", data[key]))
    return out
