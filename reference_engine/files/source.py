"""Where a model's config and weights come from: a Hugging Face directory (config.json + safetensors) or a
GGUF file (a .gguf path, or a directory holding one .gguf and no config.json). The core asks `model_source`
and never needs to know which."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from reference_engine.config import ModelConfig, load_config, model_dir_path, parse_config


@dataclass
class ModelSource:
    root: Path                       # the model directory, or the GGUF file
    config: ModelConfig
    config_path: Path                # what error messages about the config name
    open_weights: Callable[[], object]   # -> Weights or GGUFWeights (same interface)
    gguf: Path | None = None


def model_source(model_dir: str | Path) -> ModelSource:
    from reference_engine.files.gguf_weights import GGUFWeights, find_gguf
    from reference_engine.files.weights import Weights

    gguf = find_gguf(model_dir) if Path(model_dir).exists() else None
    if gguf is None:
        root = model_dir_path(model_dir)
        return ModelSource(root, load_config(root), root / "config.json", lambda: Weights.open(root))
    from reference_engine.files.gguf_config import gguf_raw_config
    weights = GGUFWeights.open(gguf)
    config = parse_config(gguf_raw_config(weights.gguf), gguf)
    return ModelSource(gguf, config, gguf, lambda: weights, gguf)
