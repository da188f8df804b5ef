"""Llama 4 text decoder (the text half of Scout and Maverick): what the files say about it."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch

LLAMA4 = "Llama4ForCausalLM"


def gguf_config(raw: dict) -> dict:
    """What llama.cpp hard-codes for llama4 (its converter writes none of it): chunks of 8192 on the RoPE layers,
    one NoPE layer in four with attention temperature (floor 8192, scale 0.1), q/k l2-norm except on the
    128-expert model; a sliding_window of 0 means a model without chunks or NoPE layers. feed_forward_length is
    the dense MLP's size (intermediate_size_mlp), expert_feed_forward_length the experts'."""
    window = raw.pop("sliding_window", None)
    out = {"intermediate_size_mlp": raw.get("intermediate_size"),
           "intermediate_size": raw.pop("expert_intermediate_size", raw.get("intermediate_size")),
           "use_qk_norm": raw.get("num_local_experts") != 128, "attn_temperature_tuning": True,
           "floor_scale": 8192, "attn_scale": 0.1, "attention_chunk_size": 8192, "no_rope_layer_interval": 4}
    if window == 0:
        out.update(attention_chunk_size=None, no_rope_layers=[1] * raw.get("num_hidden_layers", 0))
    return out

# interleaved-pair RoPE is llama.cpp's own layout (no Q/K permutation); experts fused and transposed
GGUF = GGUFArch(LLAMA4, "llama4_text",
                layer_names={"ffn_gate": "feed_forward.gate_proj", "ffn_up": "feed_forward.up_proj",
                             "ffn_down": "feed_forward.down_proj", "ffn_gate_inp": "feed_forward.router",
                             "ffn_gate_shexp": "feed_forward.shared_expert.gate_proj",
                             "ffn_up_shexp": "feed_forward.shared_expert.up_proj",
                             "ffn_down_shexp": "feed_forward.shared_expert.down_proj"},
                transposed={"feed_forward.experts.gate_up_proj": ("ffn_gate_exps", "ffn_up_exps"),
                            "feed_forward.experts.down_proj": ("ffn_down_exps",)},
                config_keys={"expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
                             "interleave_moe_layer_step": "interleave_moe_layer_step",
                             "expert_feed_forward_length": "expert_intermediate_size"},
                derive=gguf_config)

DATA = ArchitectureData("llama4", (LLAMA4,), model_types={"llama4_text": LLAMA4}, gguf={"llama4": GGUF},
                        nope_layers=True, layer_kinds={LLAMA4: ("full_attention", "chunked_attention")})
