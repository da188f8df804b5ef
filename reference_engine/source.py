"""Where a model's config and weights come from: a Hugging Face directory (config.json + safetensors; with a
`quantization_config`, its quantized weights dequantized by files/quant/) or a GGUF file (a .gguf path, or a
directory holding one .gguf and no config.json). The core asks `model_source` and never needs to know which."""
from __future__ import annotations

from dataclasses import dataclass, replace
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
    adapter: object | None = None        # reference_engine.adapter.Adapter merged into the weights
    quantization: dict | None = None     # config.json's quantization_config, when there is one


def model_source(model_dir: str | Path, adapter: str | Path | None = None) -> ModelSource:
    """adapter: a PEFT LoRA adapter directory, merged into the base's weights tensor by tensor at load."""
    source = base_source(model_dir)
    return source if adapter is None else adapted_source(source, adapter)


def base_source(model_dir: str | Path) -> ModelSource:
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
        if config.wrapper is not None:        # a multimodal checkpoint: its text decoder, under causal-LM names
            from reference_engine.files.text_decoder import text_decoder_view, tie_from_files
            config = tie_from_files(config, text_decoder_view(Weights.open(root)))     # headers only
            return ModelSource(root, config, config_path, lambda: text_decoder_view(Weights.open(root)))
        return ModelSource(root, config, config_path, lambda: Weights.open(root))
    from reference_engine.files.gguf_config import gguf_raw_config
    weights = GGUFWeights.open(gguf)
    config = parse_config(gguf_raw_config(weights.gguf), gguf)
    return ModelSource(gguf, config, gguf, lambda: weights, gguf)


def adapted_source(source: ModelSource, adapter_dir: str | Path) -> ModelSource:
    """The base's source with the adapter's weights merged in; a resized vocabulary becomes the config's."""
    from reference_engine.adapter import AdaptedWeights, adapted_vocab, read_adapter
    adapter = read_adapter(adapter_dir)
    table = AdaptedWeights(source.open_weights(), adapter)
    config = adapted_config(source.config, adapted_vocab(table), untie=table.unties)
    return replace(source, config=config, open_weights=lambda: table, adapter=adapter)


def adapted_config(config: ModelConfig, vocab: int | None, untie: bool = False) -> ModelConfig:
    """The adapted model's config: the adapter's vocabulary when it resized the embeddings; untied when it
    trained the embedding of a tied model alone (AdaptedWeights.unties)."""
    if vocab is not None and vocab != config.vocab_size:
        config = replace(config, vocab_size=vocab, raw={**config.raw, "vocab_size": vocab})
    if untie and config.tie_word_embeddings:
        config = replace(config, tie_word_embeddings=False, raw={**config.raw, "tie_word_embeddings": False})
    return config
