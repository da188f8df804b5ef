"""config.json, generation and tokenizer settings of a GGUF file, rebuilt from its metadata.

`gguf_raw_config(gguf)` returns the dict a Hugging Face config.json of the same model would hold, so that
reference_engine.config.parse_config (and every check reading `raw`) treats both formats alike.
`load_gguf_config(path)` = parse_config of it.
"""
from __future__ import annotations

from pathlib import Path

from reference_engine.config import ModelConfig, parse_config
from reference_engine.errors import ModelDirError
from reference_engine.files.gguf_arch import CONFIG_KEYS, TOKEN_ID_KEYS, layer_kinds
from reference_engine.files.gguf_file import GGUFFile
from reference_engine.files.gguf_weights import dequantize, gguf_arch


def gguf_raw_config(gguf: GGUFFile) -> dict:
    arch = gguf_arch(gguf)
    name = gguf.get("general.architecture")
    kinds = layer_kinds(gguf, arch)             # a hybrid's: head_count_kv held to the tensors
    if kinds is not None and not kinds.readable:
        raise ModelDirError(gguf.path, kinds.problem)
    raw: dict = {"architectures": [arch.architecture], "model_type": arch.model_type, "torch_dtype": "float32",
                 **arch.config_extra}
    for key, field in CONFIG_KEYS.items():
        value = gguf.get(f"{name}.{key}") if kinds is None or key != "attention.head_count_kv" else kinds.head_count_kv
        if isinstance(value, list) and arch.per_layer is not None and arch.per_layer(key, value):
            raw.update(arch.per_layer(key, value))        # a hybrid's per-layer head counts (LFM2)
            continue
        if isinstance(value, list):   # per-layer values (e.g. head_count_kv): only uniform lists are supported
            if not value or len(set(value)) != 1:
                raise ModelDirError(gguf.path, f"{name}.{key} varies per layer ({value[:4]}...), not supported")
            value = value[0]
        if value is not None:
            raw[field] = value
    for key, field in arch.config_keys.items():   # this architecture's own keys (lists kept whole)
        value = gguf.get(f"{name}.{key}")
        if value is not None:
            raw[field] = value
    if "vocab_size" not in raw:
        tokens = gguf.get("tokenizer.ggml.tokens")
        embed = gguf.tensors.get("token_embd.weight")
        raw["vocab_size"] = embed.dims[1] if embed is not None and len(embed.dims) == 2 else \
            len(tokens) if isinstance(tokens, list) else None
    raw["tie_word_embeddings"] = "output.weight" not in gguf.tensors
    raw["attention_bias"] = "blk.0.attn_q.bias" in gguf.tensors
    for key, field in TOKEN_ID_KEYS.items():
        value = gguf.get(f"tokenizer.ggml.{key}")
        if isinstance(value, int) and not isinstance(value, bool):
            raw[field] = value
    scaling = rope_scaling(gguf, name)
    factors = rope_freq_factors(gguf)
    if factors is not None:   # on top of any rope.scaling.* type (llama.cpp divides theta before yarn too)
        scaling = {**(scaling or {"rope_type": "default"}), "freq_factors": factors}
    if scaling:
        raw["rope_scaling"] = scaling
    if arch.tensor_fields is not None:
        raw.update(arch.tensor_fields(gguf.tensors))
    if arch.derive is not None:
        try:
            raw.update(arch.derive(raw))
        except ValueError as e:            # metadata that contradicts itself (gguf_mamba2: SSM sizes)
            raise ModelDirError(gguf.path, str(e)) from None
    if raw.get("sliding_window") and arch.model_type == "mistral":
        raw["use_sliding_window"] = True
    return raw


def rope_scaling(gguf: GGUFFile, name: str) -> dict | None:
    """{arch}.rope.scaling.* -> config.json rope_scaling (linear / yarn); Llama-3.1-style scaling has no
    metadata: llama.cpp stores its per-frequency factors as the rope_freqs.weight tensor instead, which
    gguf_raw_config adds as the block's freq_factors (rope_freq_factors)."""
    kind = gguf.get(f"{name}.rope.scaling.type")
    factor = gguf.get(f"{name}.rope.scaling.factor")
    if not isinstance(kind, str) or kind == "none" or not isinstance(factor, (int, float)):
        return None
    out = {"rope_type": kind, "factor": float(factor)}
    original = gguf.get(f"{name}.rope.scaling.original_context_length")
    if isinstance(original, int):
        out["original_max_position_embeddings"] = original
    return out


def rope_freq_factors(gguf: GGUFFile) -> list[float] | None:
    """rope_freqs.weight as a list (head_dim/2 divisors of the rotary frequencies: Llama 3.1+ scaling as
    convert_hf_to_gguf computes it from rope_scaling llama3), or None. core/rope.py divides by them; the length
    is checked there against the rotary dimension (and by GGF007). Phi-3's rope_factors_long/short would map to
    longrope's long_factor/short_factor, but no phi3 architecture is mapped (gguf_arch.ARCHS)."""
    tensor = gguf.tensors.get("rope_freqs.weight")
    if tensor is None:
        return None
    try:
        values = dequantize(gguf, tensor)
    except (ValueError, RuntimeError) as e:
        raise ModelDirError(gguf.path, f"tensor 'rope_freqs.weight': cannot read: {e}") from None
    return [float(v) for v in values.reshape(-1).tolist()]


def load_gguf_config(path: str | Path, gguf: GGUFFile | None = None) -> ModelConfig:
    gguf = gguf or GGUFFile.open(path)
    return parse_config(gguf_raw_config(gguf), gguf.path)
