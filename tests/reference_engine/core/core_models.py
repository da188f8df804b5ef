"""Shared, cached builders for the core tests: transformers-built model dirs and engines over them."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

from reference_engine.engine import Engine
from tests.hf_models import VARIANTS, VOCAB, build_hf_model, load_hf_model

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-core-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


@functools.cache
def hf_dir(variant: str) -> Path:
    return build_hf_model(_ROOT / variant, variant)


@functools.cache
def hf_model(variant: str):
    return load_hf_model(hf_dir(variant))


def engine(variant: str = "llama_gqa4_tied_bias", **kw) -> Engine:
    return Engine.from_pretrained(hf_dir(variant), **kw)


def random_ids(n: int, seed: int = 0, vocab: int = VOCAB) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


__all__ = ["VARIANTS", "VOCAB", "hf_dir", "hf_model", "engine", "random_ids"]
