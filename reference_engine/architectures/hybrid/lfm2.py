"""LFM2 (Liquid): what the files say about it -- Lfm2Config's defaults and the names it reads its fields under,
and its GGUF (`lfm2`): feed_forward_length is the MLP width after block_auto_adjust_ff_dim, the conv taps are
stored [C, K], a conv layer has head_count_kv 0."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch, layer_kinds_from_kv

LFM2 = "Lfm2ForCausalLM"


def gguf_shape(hf: str, shape: tuple) -> tuple:
    """LFM2's conv taps: llama.cpp stores [C, K], transformers' Conv1d weight is [C, 1, K]."""
    return (shape[0], 1, *shape[1:]) if hf.endswith("conv.conv.weight") else tuple(shape)


GGUF = GGUFArch(LFM2, "lfm2", config_extra={"block_auto_adjust_ff_dim": False},
                layer_names={"attn_norm": "operator_norm", "ffn_norm": "ffn_norm", "ffn_gate": "feed_forward.w1",
                             "ffn_up": "feed_forward.w3", "ffn_down": "feed_forward.w2",
                             "attn_output": "self_attn.out_proj", "attn_q_norm": "self_attn.q_layernorm",
                             "attn_k_norm": "self_attn.k_layernorm", "shortconv.conv": "conv.conv",
                             "shortconv.in_proj": "conv.in_proj", "shortconv.out_proj": "conv.out_proj"},
                global_names={"token_embd_norm": "model.embedding_norm"},
                config_keys={"shortconv.l_cache": "conv_L_cache",     # Lfm2Config reads norm_eps only
                             "attention.layer_norm_rms_epsilon": "norm_eps"},
                per_layer=layer_kinds_from_kv("conv", "full_attention"), hf_shape=gguf_shape)

DATA = ArchitectureData(
    "lfm2", (LFM2,), model_types={"lfm2": LFM2},
    # Lfm2Config: its norms' eps (norm_eps 1e-5), tied embeddings
    class_defaults={"lfm2": {"norm_eps": 1e-5, "tie_word_embeddings": True}},
    # Lfm2Config reads these under its own name, ignoring the canonical one (a generic rms_norm_eps beside
    # norm_eps runs nothing in transformers); it also takes the LFM2 release's block_ff_dim and tie_embedding over
    # intermediate_size and tie_word_embeddings (its __post_init__ pops them)
    own_fields={"lfm2": {"rms_norm_eps": "norm_eps", "intermediate_size": "block_ff_dim",
                         "tie_word_embeddings": "tie_embedding"}},
    rope_theta={"lfm2": 1000000.0},          # transformers 5's `default_theta`
    gguf={"lfm2": GGUF}, recurrent="short_conv")
