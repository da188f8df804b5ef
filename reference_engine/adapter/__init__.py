"""PEFT LoRA adapters: read an adapter directory, and run a base model with it merged at load.

    adapter = read_adapter("adapter/")                 # adapter_config.json + adapter_model.safetensors
    table = AdaptedWeights(Weights.open("base/"), adapter)   # get(name) -> the merged weight
    Engine.from_pretrained("base/", adapter="adapter/")
"""
from reference_engine.adapter.config import ADAPTER_CONFIG, AdapterConfig
from reference_engine.adapter.reader import ADAPTER_WEIGHTS, Adapter, LoraModule, is_adapter_dir, read_adapter
from reference_engine.adapter.weights import AdaptedWeights, adapted_vocab

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "Adapter", "AdapterConfig", "AdaptedWeights", "LoraModule",
           "adapted_vocab", "is_adapter_dir", "read_adapter"]
