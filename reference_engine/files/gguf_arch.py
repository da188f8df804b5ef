"""What differs between architectures in a GGUF file, as data: the Hugging Face architecture, how llama.cpp's
tensor names map back to Hugging Face names, whether Q/K rows were permuted, norm offsets, and which
`{arch}.*` metadata keys become which config.json fields.

A new architecture is one GGUFArch entry (see `ARCHS`); the families helper adds gemma3 & co. here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from reference_engine.files import gguf_linear_attn

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


@dataclass(frozen=True)
class GGUFArch:
    architecture: str                 # Hugging Face architectures[0]
    model_type: str
    permute_qk: bool = False          # convert_hf_to_gguf permutes q/k rows for llama.cpp's rotary layout
    layer_names: dict = field(default_factory=dict)   # overrides of LAYER_NAMES
    norm_offset: float = 0.0          # GGUF norm weight = HF weight + norm_offset (Gemma's (1 + w) RMSNorm)
    config_extra: dict = field(default_factory=dict)  # fixed config.json fields
    derive: Callable[[dict], dict] | None = None      # config.json fields computed from the mapped ones
    tensor_names: dict = field(default_factory=dict)  # whole names inside blk.N (suffix included) -> HF names
    config_keys: dict = field(default_factory=dict)   # {arch}.<key> -> config.json field, this architecture's
    # a tensor the converter reshaped or reordered: touches(hf name), finish(hf name, tensor, meta) -> HF
    # layout (meta(key) reads {arch}.<key>), hf_shape(hf name, stored shape) -> HF shape
    touches: Callable[[str], bool] | None = None
    finish: Callable | None = None
    hf_shape: Callable | None = None
    global_names: dict = field(default_factory=dict)  # overrides of GLOBAL_NAMES
    per_layer: Callable[[str, list], dict] | None = None   # a per-layer list value (head_count_kv) -> fields


def _lfm2_layers(key: str, values: list) -> dict:
    """LFM2: head_count_kv is 0 on the conv layers (convert_hf_to_gguf's LFM2Model), so it says layer_types."""
    if key != "attention.head_count_kv":
        return {}
    return {"num_key_value_heads": max(values) or 1,
            "layer_types": ["conv" if v == 0 else "full_attention" for v in values]}


def _lfm2_shape(hf: str, shape: tuple) -> tuple:
    """LFM2's conv taps: llama.cpp stores [C, K], transformers' Conv1d weight is [C, 1, K]."""
    return (shape[0], 1, *shape[1:]) if hf.endswith("conv.conv.weight") else tuple(shape)


def _gemma3_config(raw: dict) -> dict:
    """What llama.cpp hard-codes for gemma3 and Hugging Face writes in config.json: queries scaled by
    head_dim ** -0.5, local (sliding) layers on rope base 10000, one global layer in every six."""
    return {"query_pre_attn_scalar": raw.get("head_dim", 256), "rope_local_base_freq": 10000.0,
            "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh"}


QWEN35 = dict(tensor_names=gguf_linear_attn.TENSOR_NAMES, config_keys=gguf_linear_attn.CONFIG_KEYS,
              derive=gguf_linear_attn.derive_config, touches=gguf_linear_attn.touches,
              finish=gguf_linear_attn.finish, hf_shape=gguf_linear_attn.hf_shape)
ARCHS: dict[str, GGUFArch] = {
    "llama": GGUFArch("LlamaForCausalLM", "llama", permute_qk=True),
    "mistral": GGUFArch("MistralForCausalLM", "mistral", permute_qk=True),
    "qwen2": GGUFArch("Qwen2ForCausalLM", "qwen2"),
    "qwen3": GGUFArch("Qwen3ForCausalLM", "qwen3"),
    "gemma3": GGUFArch("Gemma3ForCausalLM", "gemma3_text", norm_offset=1.0,
                       layer_names={"post_attention_norm": "post_attention_layernorm",
                                    "ffn_norm": "pre_feedforward_layernorm",
                                    "post_ffw_norm": "post_feedforward_layernorm"},
                       derive=_gemma3_config),
    "qwen35": GGUFArch("Qwen3_5ForCausalLM", "qwen3_5_text", **QWEN35),
    # LFM2: feed_forward_length is the MLP width after block_auto_adjust_ff_dim; the conv taps are stored [C, K]
    "lfm2": GGUFArch("Lfm2ForCausalLM", "lfm2", config_extra={"block_auto_adjust_ff_dim": False},
                     layer_names={"attn_norm": "operator_norm", "ffn_norm": "ffn_norm", "ffn_gate": "feed_forward.w1",
                                  "ffn_up": "feed_forward.w3", "ffn_down": "feed_forward.w2",
                                  "attn_output": "self_attn.out_proj", "attn_q_norm": "self_attn.q_layernorm",
                                  "attn_k_norm": "self_attn.k_layernorm", "shortconv.conv": "conv.conv",
                                  "shortconv.in_proj": "conv.in_proj", "shortconv.out_proj": "conv.out_proj"},
                     global_names={"token_embd_norm": "model.embedding_norm"},
                     config_keys={"shortconv.l_cache": "conv_L_cache"}, per_layer=_lfm2_layers,
                     hf_shape=_lfm2_shape),
}


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


def is_norm(hf_name: str) -> bool:
    return hf_name.endswith("norm.weight")
