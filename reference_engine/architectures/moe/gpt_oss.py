"""gpt-oss: what the files say about it."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch

GPT_OSS = "GptOssForCausalLM"
# transformers' GptOssConfig defaults (the released models' values), for configs that leave a field out
DEFAULT_SWIGLU_LIMIT, DEFAULT_SWIGLU_ALPHA, DEFAULT_TOP_K = 7.0, 1.702, 4


def gguf_config(raw: dict) -> dict:
    """What llama.cpp hard-codes for gpt-oss (the converter writes none of it), set to the released models'
    config.json values: the clamped SwiGLU's limit 7.0 and alpha 1.702 (llama-graph.cpp, LLM_FFN_SWIGLU_OAI_MOE);
    the window on even layers, full attention on odd ones (models/openai-moe.cpp: load_swa_pattern(2), which a
    attention.sliding_window_pattern key, a bool per layer or a period, overrides: read the same way); YaRN with
    the beta_fast / beta_slow the converter writes and `truncate` false (the released config: transformers keeps
    the correction range unrounded, where ggml_rope_yarn_corr_dims floors/ceils it; the GGUF reads as the model
    it came from)."""
    n, beta_fast, beta_slow = raw.get("num_hidden_layers", 0), raw.pop("beta_fast", None), raw.pop("beta_slow", None)
    pattern = raw.pop("sliding_window_pattern", 2)
    if isinstance(pattern, list) and len(pattern) == n:
        sliding = [bool(p) for p in pattern]
    else:                                   # llama_hparams::set_swa_pattern(n_pattern): il % n < n - 1
        period = pattern if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 0 else 2
        sliding = [period == 0 or i % period < period - 1 for i in range(n)]
    out = {"swiglu_limit": DEFAULT_SWIGLU_LIMIT, "swiglu_alpha": DEFAULT_SWIGLU_ALPHA,
           "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding]}
    scaling = raw.get("rope_scaling")
    if isinstance(scaling, dict) and scaling.get("rope_type") == "yarn":
        out["rope_scaling"] = {**scaling, "truncate": False,
                               **({"beta_fast": beta_fast} if beta_fast is not None else {}),
                               **({"beta_slow": beta_slow} if beta_slow is not None else {})}
    return out

# experts stacked and split, gate/up de-interleaved (weights and biases): interleaved back into transformers'
# fused gate_up; MXFP4 experts are ggml's block_mxfp4 (files/gguf_mxfp4.py)
GGUF = GGUFArch(GPT_OSS, "gpt_oss",
                layer_names={"post_attention_norm": "post_attention_layernorm", "ffn_gate_inp": "mlp.router"},
                tensor_names={"attn_sinks.weight": "self_attn.sinks",
                              "ffn_down_exps.bias": "mlp.experts.down_proj_bias"},
                transposed={"mlp.experts.down_proj": ("ffn_down_exps",)},
                interleaved={"mlp.experts.gate_up_proj": ("ffn_gate_exps.weight", "ffn_up_exps.weight"),
                             "mlp.experts.gate_up_proj_bias": ("ffn_gate_exps.bias", "ffn_up_exps.bias")},
                config_keys={"expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
                             "rope.scaling.yarn_beta_fast": "beta_fast", "rope.scaling.yarn_beta_slow": "beta_slow",
                             "attention.sliding_window_pattern": "sliding_window_pattern"},
                derive=gguf_config)

DATA = ArchitectureData("gpt_oss", (GPT_OSS,), model_types={"gpt_oss": GPT_OSS}, gguf={"gpt-oss": GGUF})
