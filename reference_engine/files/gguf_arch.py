"""What differs between architectures in a GGUF file, as data: the Hugging Face architecture, how llama.cpp's
tensor names map back to Hugging Face names, whether Q/K rows were permuted, norm offsets, and which
`{arch}.*` metadata keys become which config.json fields.

Each architecture's entry (a GGUFArch) lives in its family's data module (reference_engine/architectures); `ARCHS`
collects them. What every architecture shares is here.
"""
from __future__ import annotations

from dataclasses import dataclass

from reference_engine.architectures import GGUF_ARCHS, GGUFArch

# llama.cpp name (without "blk.N." and ".weight"/".bias") -> Hugging Face name inside model.layers.N
LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# Tensors llama.cpp stores that have no Hugging Face counterpart: kept aside (GGUFWeights.extra).
EXTRA_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")

# {arch}.<key> -> config.json field (shared by every architecture below)
CONFIG_KEYS = {
    "embedding_length": "hidden_size", "feed_forward_length": "intermediate_size",
    "block_count": "num_hidden_layers", "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads", "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta", "context_length": "max_position_embeddings",
    "attention.key_length": "head_dim", "attention.sliding_window": "sliding_window", "vocab_size": "vocab_size",
}
# tokenizer.ggml.<key> -> config.json field
TOKEN_ID_KEYS = {"bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id",
                 "padding_token_id": "pad_token_id"}


ARCHS: dict[str, GGUFArch] = GGUF_ARCHS
# the names every architecture shares (no overrides), for a llama.cpp name whose architecture is not known
SHARED_NAMES = GGUFArch("", "")


def hf_tensor_name(gguf_name: str, arch: GGUFArch) -> str | None:
    """The Hugging Face name of a llama.cpp tensor, or None when it has none."""
    block = gguf_name.split(".", 2)
    if len(block) == 3 and block[0] == "blk" and block[1].isdigit() and block[2] in arch.tensor_names:
        return f"model.layers.{int(block[1])}.{arch.tensor_names[block[2]]}"
    stem, dot, suffix = gguf_name.rpartition(".")
    if not dot or suffix not in ("weight", "bias"):
        return None
    globals_ = {**GLOBAL_NAMES, **arch.global_names}
    if stem in globals_:
        return f"{globals_[stem]}.{suffix}"
    parts = stem.split(".", 2)
    if len(parts) != 3 or parts[0] != "blk" or not parts[1].isdigit():
        return None
    names = {**LAYER_NAMES, **arch.layer_names}
    hf = names.get(parts[2])
    return None if hf is None else f"model.layers.{int(parts[1])}.{hf}.{suffix}"


def stem_sets(value: tuple) -> list[tuple]:
    """A `transposed` value as its alternatives (one tuple of stems, or a tuple of such tuples)."""
    return list(value) if value and isinstance(value[0], tuple) else [value]


def transposed_part(gguf_name: str, arch: GGUFArch) -> tuple[int, str] | None:
    """(layer, Hugging Face name inside it) when the tensor is one part of a `transposed` or `interleaved`
    Hugging Face tensor."""
    block = gguf_name.split(".", 2)
    if len(block) == 3 and block[0] == "blk" and block[1].isdigit():
        hf = next((h for h, names in arch.interleaved.items() if block[2] in names), None)
        if hf is not None:
            return int(block[1]), hf
    parts = gguf_name.split(".")
    if len(parts) != 4 or parts[0] != "blk" or not parts[1].isdigit() or parts[3] != "weight":
        return None
    hf = next((h for h, value in arch.transposed.items() if any(parts[2] in s for s in stem_sets(value))), None)
    return None if hf is None else (int(parts[1]), hf)


def expert_pattern(gguf_name: str, arch: GGUFArch) -> str | None:
    """For a stacked expert tensor ("blk.3.ffn_gate_exps.weight"), its per-expert Hugging Face name with {e}."""
    parts = gguf_name.split(".")
    if len(parts) != 4 or parts[0] != "blk" or not parts[1].isdigit() or parts[3] != "weight":
        return None
    pattern = arch.experts.get(parts[2])
    return None if pattern is None else f"model.layers.{int(parts[1])}.{pattern}"


@dataclass(frozen=True)
class LayerKinds:
    """A hybrid's per-layer head_count_kv (0: a recurrent layer) held to the tensors each layer holds."""
    head_count_kv: list       # per layer; a misfiled layer's KV heads from its attn_k rows
    misfiled: frozenset       # attention layers the metadata counts recurrent (written by the converter's
    # recurrent path: q/k not permuted)
    problem: str | None       # the disagreement in one line (GGF035)
    readable: bool            # False: a layer counted attention holds no attention tensors, or no attn_k to count


def layer_kinds(gguf, arch: GGUFArch) -> LayerKinds | None:
    """The layer kinds of a hybrid GGUF (arch.per_layer), None for other files. The pinned converter finds
    Granite 4's attention layers only by layer_types "attention": from transformers 5's "full_attention" it writes
    head_count_kv 0 on every layer beside the attention tensors, which llama.cpp refuses; their tensors say what
    they are, so they are read as attention layers (and GGF035 reports the file)."""
    name = gguf.get("general.architecture")
    kv = gguf.get(f"{name}.attention.head_count_kv")
    if arch.per_layer is None or not isinstance(kv, list):
        return None
    layer = {t: int(t.split(".")[1]) for t in gguf.tensors if t.startswith("blk.") and t.split(".")[1].isdigit()}
    held = {i for t, i in layer.items() if t.endswith((".attn_q.weight", ".attn_qkv.weight"))}
    k_rows = {i: gguf.tensors[t].shape[0] for t, i in layer.items() if t.endswith(".attn_k.weight")}
    heads, hidden = gguf.get(f"{name}.attention.head_count"), gguf.get(f"{name}.embedding_length")
    head_dim = gguf.get(f"{name}.attention.key_length") or \
        (hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else 0)
    misfiled = frozenset(i for i in held if i < len(kv) and kv[i] == 0)
    missing = [i for i, v in enumerate(kv) if v > 0 and i not in held]
    fixed = [k_rows.get(i, 0) // head_dim if i in misfiled and head_dim else v for i, v in enumerate(kv)]
    said = [i for i, v in enumerate(kv) if v > 0]
    problem = None
    if missing:
        problem = (f"layer {missing[0]}: {name}.attention.head_count_kv {kv[missing[0]]} makes it an attention "
                   f"layer but it holds no attention tensors (attention layers by head_count_kv {said}, by "
                   f"tensors {sorted(held)})")
    elif misfiled:
        problem = (f"layer {min(misfiled)} holds attention tensors but {name}.attention.head_count_kv is 0 there: "
                   f"llama.cpp takes it for a recurrent layer and refuses the file (attention layers by "
                   f"head_count_kv {said}, by tensors {sorted(held)}); the converter writes this from a Granite 4 "
                   f"config whose layer_types say \"full_attention\": reconvert from one that says \"attention\" "
                   f"(CFG043)")
    return LayerKinds(fixed, misfiled, problem, not missing and all(fixed[i] > 0 for i in misfiled))


def is_norm(hf_name: str) -> bool:
    return hf_name.endswith("norm.weight")
