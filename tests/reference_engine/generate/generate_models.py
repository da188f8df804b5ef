"""Shared builders for the generate-loop tests: factory model dirs with peaked logits, engines, HF oracles."""
from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import torch

from reference_engine.engine import Engine
from reference_engine.testing.factory import build_model_dir

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-generate-"))
# initializer_range 0.1 instead of 0.02: logits far from flat, so greedy argmax never hangs on a near-tie
INIT = 0.1


@functools.cache
def model_dir(preset: str = "llama", seed: int = 1, **overrides) -> Path:
    name = "-".join([preset, str(seed)] + [f"{k}={v}" for k, v in sorted(overrides.items())])
    return build_model_dir(_ROOT / name, preset, seed=seed, initializer_range=INIT, **overrides)


def engine(preset: str = "llama", num_blocks: int | None = None, block_size: int = 16, **overrides) -> Engine:
    return Engine.from_pretrained(model_dir(preset, **overrides), num_blocks=num_blocks, block_size=block_size)


@functools.cache
def hf_model(path: Path):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def hf_generate(path: Path, prompt_ids: list[int], **kw) -> list[int]:
    """transformers' generate on one unpadded prompt; the new ids only."""
    ids = torch.tensor([prompt_ids])
    out = hf_model(path).generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **kw)
    return out[0, len(prompt_ids):].tolist()
