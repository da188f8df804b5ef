"""Where a model's config and weights come from: a Hugging Face directory (config.json + safetensors; with a
`quantization_config`, its quantized weights dequantized by files/quant/) or a GGUF file (a .gguf path, or a
directory holding one .gguf and no config.json). The core asks `model_source` and never needs to know which."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from reference_engine.config import ModelConfig, load_config, model_dir_path, parse_config, read_json


@dataclass
class ModelSource:
    root: Path                       # the model directory, or the GGUF file
    config: ModelConfig
    config_path: Path                # what error messages about the config name
    open_weights: Callable[[], object]   # -> Weights, QuantizedWeights or GGUFWeights (same interface)
    gguf: Path | None = None
    quantization: dict | None = None     # config.json's quantization_config, when there is one


def model_source(model_dir: str | Path) -> ModelSource:
    from reference_engine.files.gguf_weights import GGUFWeights, find_gguf
    from reference_engine.files.weights import Weights

    gguf = find_gguf(model_dir) if Path(model_dir).exists() else None
    if gguf is None:
        root = model_dir_path(model_dir)
        config, config_path = load_config(root), root / "config.json"
        qconfig = read_json(config_path).get("quantization_config")
        if qconfig is not None:
            from reference_engine.files.quant import QuantizedWeights
            return ModelSource(root, config, config_path,
                               lambda: QuantizedWeights.open(root, qconfig, config_path), quantization=qconfig)
        return ModelSource(root, config, config_path, lambda: Weights.open(root))
    from reference_engine.files.gguf_config import gguf_raw_config
    weights = GGUFWeights.open(gguf)
    config = parse_config(gguf_raw_config(weights.gguf), gguf)
    return ModelSource(gguf, config, gguf, lambda: weights, gguf)
