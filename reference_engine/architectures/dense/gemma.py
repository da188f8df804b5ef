"""Gemma 2 and Gemma 3 (text): what the files say about them."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch

GEMMA2, GEMMA3 = "Gemma2ForCausalLM", "Gemma3ForCausalLM"


def gguf_config(raw: dict) -> dict:
    """What llama.cpp hard-codes for gemma3 and Hugging Face writes in config.json: queries scaled by
    head_dim ** -0.5, local (sliding) layers on rope base 10000, one global layer in every six."""
    return {"query_pre_attn_scalar": raw.get("head_dim", 256), "rope_local_base_freq": 10000.0,
            "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh"}


DATA = ArchitectureData(
    "gemma", (GEMMA2, GEMMA3),
    model_types={"gemma2": GEMMA2, "gemma3_text": GEMMA3},
    # transformers writes a multimodal wrapper's text_config as a diff against its class (to_diff_dict): real
    # Gemma 3 4B/12B/27B configs name only a few fields, so a sparse text_config means rope_theta 1e6, not our
    # generic 10000
    class_defaults={"gemma3_text": {
        "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "sliding_window_pattern": 6, "attention_bias": False,
        "final_logit_softcapping": None, "attn_logit_softcapping": None}},
    gguf={"gemma3": GGUFArch(GEMMA3, "gemma3_text", norm_offset=1.0,
                             layer_names={"post_attention_norm": "post_attention_layernorm",
                                          "ffn_norm": "pre_feedforward_layernorm",
                                          "post_ffw_norm": "post_feedforward_layernorm"},
                             derive=gguf_config)})
