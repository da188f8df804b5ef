"""Tiny Qwen3-Next / Qwen3.5-MoE models beside their F32 GGUF, converted by llama.cpp's pinned
convert_hf_to_gguf.py once per test session."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from tests.reference_engine.core.tiny_models import build

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-gguf-pairs-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)

# GGUF architecture -> (variant, tokenizer, seed): the pinned converter must recognise the tokenizer's
# pre-tokenizer, and transformers 5 loads a qwen3_5_moe_text directory's tokenizer as Qwen3_5Tokenizer (Qwen3.5's
# own regex over the file's vocabulary, whatever tokenizer.json says), recognised only over Qwen's own vocabulary
# (the sdist's ggml-vocab-qwen35, as transformers converts it); Qwen3-Next's directory keeps SmolLM2's tokenizer.
# Seed 1 for Qwen3.5-MoE: seed 0's router sends 92% of the probe tokens to one expert of layer 3 (MOE005 warns)
GGUF_VARIANTS = {"qwen3next": ("next_moe_gguf", "smollm2", 0), "qwen35moe": ("qwen35_moe_gguf", "qwen35", 1)}


@functools.cache
def gguf_pair(arch: str) -> tuple[Path, Path]:
    """(safetensors directory, its F32 GGUF by llama.cpp's pinned convert_hf_to_gguf.py --no-mtp), converted
    once per session (~10-15 s each on 2 cores); AssetError when an asset cannot be fetched."""
    from tests import assets, assets_gguf
    variant, tokenizer, seed = GGUF_VARIANTS[arch]
    tok_dir = assets.smollm2_dir() if tokenizer == "smollm2" else assets_gguf.hf_tokenizer_of_vocab_gguf(tokenizer)
    hf_dir = build(_ROOT / f"{arch}-gguf" / "hf", variant, seed, tok_dir)
    return hf_dir, assets_gguf.convert_hf_dir(hf_dir, hf_dir.parent / f"{arch}-f32.gguf", "f32", None, ("--no-mtp",))
