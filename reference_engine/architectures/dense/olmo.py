"""OLMo 2 and OLMo 3: what the files say about them."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch

OLMO2, OLMO3 = "Olmo2ForCausalLM", "Olmo3ForCausalLM"


def gguf_config(raw: dict) -> dict:
    """llama.cpp writes OLMo 2 and OLMo 3 as "olmo2"; a sliding window makes it OLMo 3, whose layer kinds come
    from attention.sliding_window_pattern (True = sliding) and whose RoPE scaling applies to the full layers
    only (llama.cpp: rope_freq_scale_train_swa = 1; transformers: the sliding block is plain RoPE)."""
    if not raw.get("sliding_window"):
        return {}
    n, pattern = raw.get("num_hidden_layers", 0), raw.pop("sliding_window_pattern", None)
    if not isinstance(pattern, list) or len(pattern) != n:
        pattern = [(i + 1) % 4 != 0 for i in range(n)]
    theta = raw.get("rope_theta", 10000.0)
    out = {"architectures": [OLMO3], "model_type": "olmo3",
           "layer_types": ["sliding_attention" if s else "full_attention" for s in pattern]}
    if raw.get("rope_scaling"):
        out["rope_parameters"] = {"full_attention": {**raw["rope_scaling"], "rope_theta": theta},
                                  "sliding_attention": {"rope_type": "default",
                                                        "rope_theta": raw.pop("rope_theta_swa", theta)}}
    return out


DATA = ArchitectureData(
    "olmo", (OLMO2, OLMO3), model_types={"olmo2": OLMO2, "olmo3": OLMO3},
    gguf={"olmo2": GGUFArch(OLMO2, "olmo2",
                            layer_names={"post_attention_norm": "post_attention_layernorm",
                                         "post_ffw_norm": "post_feedforward_layernorm"},
                            derive=gguf_config,
                            config_keys={"attention.sliding_window_pattern": "sliding_window_pattern",
                                         "rope.freq_base_swa": "rope_theta_swa"})},
    layer_kinds={OLMO3: ("full_attention", "sliding_attention")})
