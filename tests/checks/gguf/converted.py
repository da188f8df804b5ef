"""A tiny Llama with SmolLM2's tokenizer (which llama.cpp's converter recognises) and a yarn rope block, converted
by the pinned convert_hf_to_gguf.py to F32: the healthy conversion the files-and-conversion tests edit into each
fault (tests/checks/gguf/edited.py). Built once into the asset cache (~15 s), a 25 MB file."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.assets import cached_dir, or_fail, smollm2_dir
from tests.assets_gguf import convert_hf_dir

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 1.0}
GGUF_NAME = "tiny-yarn-f32.gguf"


def _build(out: Path) -> None:
    from reference_engine.testing.factory import build_model_dir
    tokenizer = smollm2_dir()
    vocab = len(json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"])
    hf = build_model_dir(out / "hf", "llama", vocab_size=vocab, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                         rope_scaling=dict(YARN))
    (hf / "special_tokens_map.json").unlink()         # the factory's own special tokens are not in this vocabulary
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / name, hf / name)
    convert_hf_dir(hf, out / GGUF_NAME, "f32")


def tiny_conversion() -> tuple[Path, Path]:
    """(the Hugging Face directory, the GGUF llama.cpp's converter made of it); treat both as read-only."""
    root = or_fail(cached_dir, "incident-tiny-yarn-v1", _build)
    return root / "hf", root / GGUF_NAME


def beside(gguf: Path, hf: Path, dst: Path, config_edit=None) -> Path:
    """gguf copied (or linked) into dst with the config.json it was converted from beside it (edited)."""
    dst.mkdir(parents=True, exist_ok=True)
    target = dst / gguf.name
    if gguf.parent != dst:
        try:
            target.hardlink_to(gguf)
        except OSError:
            shutil.copy(gguf, target)
    raw = json.loads((hf / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(config_edit(raw) if config_edit else raw))
    return target
