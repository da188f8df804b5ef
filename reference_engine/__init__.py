"""reference_engine: a readable three-stage LLM inference engine.

    tokenizer/  stage 1: text -> token ids
    core/       stage 2: token ids -> logits (decoder, RoPE, paged KV cache)
    generate/   stage 3: logits -> tokens -> text (sampler, beam, stopping, streaming, continuous batching)
    engine.py   Engine: the three stages composed
    files/      safetensors and weight files, validated before use
    testing/    not inference: tiny model directories and BPE training for tests and the demo

Public names are imported lazily so that `import reference_engine` stays cheap and each stage can be
used on its own.
"""
import os
from importlib import import_module

# OpenMP threads that wait by spinning hold their core while the thread they wait for cannot run: on a machine
# whose cores are all busy each small parallel op then costs a scheduler slice, and a MoE layer is thousands of
# them (a streamed Qwen3-Next prefill pass: 39.5 s spinning, 2.05 s sleeping, at load 7-11 on 2 cores:
# benchmarks/streaming_hybrid.py). Waiters that sleep cost nothing measurable on an idle machine. libgomp reads
# this once, when torch loads: set here, before any engine module imports torch; a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_EXPORTS = {
    "ModelDirError": "errors",
    "UnsupportedError": "errors",
    "ModelConfig": "config",
    "GenerationConfig": "config",
    "load_config": "config",
    "load_generation_config": "config",
    "load_tokenizer_config": "config",
    "Weights": "files.weights",
    "Tokenizer": "tokenizer",
    "CoreEngine": "core",
    "Engine": "engine",
    "SamplingParams": "generate",
    "Output": "generate",
    "train_bpe": "testing.train_bpe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
