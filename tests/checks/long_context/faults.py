"""Broken long-context copies of real models: the weights untouched (linked), config.json changed
the way a conversion or a serving config really gets it wrong. Each reads well near and not far, which
transformers itself shows (oracle.py) before a test counts the fault as caught.

    path = FAULTS["window_every_layer"](gemma3_dir, tmp / "model")
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


def link(src: Path, dst: Path) -> None:
    """A hard link (the engine refuses symlinked shards), a copy across filesystems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy(src, dst)


def edited(src: Path, dst: Path, edit) -> Path:
    """dst: src's files (weights hard-linked, never written), config.json passed through `edit`."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(src).iterdir():
        if f.suffix == ".safetensors":
            link(f, dst / f.name)
        elif f.is_file() and f.name != "config.json":
            shutil.copy(f, dst / f.name)
    raw = json.loads((Path(src) / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(edit(raw), indent=2))
    return dst


def short_window(src, dst, window: int = 256) -> Path:
    """A Llama exported as Mistral with a sliding_window far shorter than its context (a config template of
    the wrong model): every layer sees only the last `window` tokens."""
    return edited(src, dst, lambda raw: {**raw, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                         "sliding_window": window})


def window_every_layer(src, dst) -> Path:
    """Gemma 3 with its sliding window on every layer (vllm#21863): the global layers are gone."""
    return edited(src, dst, lambda raw: {**raw, "layer_types": ["sliding_attention"] * raw["num_hidden_layers"]})


def rope_bases_swapped(src, dst) -> Path:
    """Gemma 3 with its local and global rope bases swapped (10k on the global layers, 1M on the local ones)."""
    def edit(raw):
        params = raw["rope_parameters"]
        return {**raw, "rope_parameters": {"full_attention": params["sliding_attention"],
                                           "sliding_attention": params["full_attention"]}}
    return edited(src, dst, edit)


def rope_base_changed(src, dst, theta: float = 1000.0) -> Path:
    """SmolLM2 with rope_theta 1000 instead of its 100k (a config template of another model): near positions
    still rotate apart, far ones alias."""
    return edited(src, dst, lambda raw: {**raw, "rope_parameters": {**raw["rope_parameters"], "rope_theta": theta}})


def rope_scaling_added(src, dst, factor: float = 4.0) -> Path:
    """SmolLM2 with a linear rope scaling it was never trained with (positions squeezed `factor` times)."""
    return edited(src, dst, lambda raw: {**raw, "rope_parameters": {**raw["rope_parameters"], "rope_type": "linear",
                                                                    "factor": factor}})


def window_by_design(src, dst, window: int = 256, declared: int = 1024, theta: float | None = None) -> Path:
    """Not a fault: SmolLM2 as a Mistral-7B-v0.1 shape scaled down, one sliding_window declared for every layer
    and a max_position_embeddings its layers stacked reach (30 x window >= declared; v0.1: 4096 of 32768,
    Phi-3-mini-4k: 2047 of 4096). Reading stops at the window by design. theta: a rope base fault on top."""
    def edit(raw):
        out = {**raw, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": window,
               "max_position_embeddings": declared}
        return out if theta is None else {**out, "rope_parameters": {**raw["rope_parameters"], "rope_theta": theta}}
    return edited(src, dst, edit)


SMOLLM2_FAULTS = {"short_window": short_window, "rope_base_changed": rope_base_changed,
                  "rope_scaling_added": rope_scaling_added}
GEMMA3_FAULTS = {"window_every_layer": window_every_layer, "rope_bases_swapped": rope_bases_swapped}
