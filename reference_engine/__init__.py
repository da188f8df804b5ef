"""reference_engine: a readable three-stage LLM inference engine (tokenizer -> transformer core -> detokenizer).

Public names are imported lazily so that `import reference_engine` stays cheap and each stage can be
used on its own.
"""
from importlib import import_module

_EXPORTS = {
    "ModelDirError": "errors",
    "UnsupportedError": "errors",
    "ModelConfig": "config",
    "GenerationConfig": "config",
    "load_config": "config",
    "load_generation_config": "config",
    "load_tokenizer_config": "config",
    "Weights": "weights",
    "Tokenizer": "tokenizer",
    "train_bpe": "train_bpe",
    "Engine": "engine",
    "SamplingParams": "sampling_params",
    "Output": "generate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
