"""What differs between architectures in a GGUF file, as data: the Hugging Face architecture, how llama.cpp's
tensor names map back to Hugging Face names, whether Q/K rows were permuted, norm offsets, and which
`{arch}.*` metadata keys become which config.json fields.

A new architecture is one GGUFArch entry (see `ARCHS`); the families helper adds gemma3 & co. here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from reference_engine.files import gguf_linear_attn, gguf_mamba2, gguf_mla

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
    experts: dict = field(default_factory=dict)       # stacked [experts, ...] stem -> per-expert name with {e}
    # Hugging Face tensor inside the layer -> llama.cpp stems whose [.., rows, cols] tensors, each transposed to
    # [.., cols, rows], are concatenated along the last dim (Llama 4's fused [experts, hidden, 2 * inter]); or a
    # tuple of such tuples, alternatives: the one whose stems the layer holds (Granite's shared MLP is
    # ffn_gate_shexp / ffn_up_shexp beside experts, ffn_gate / ffn_up without)
    transposed: dict = field(default_factory=dict)
    # Hugging Face tensor inside the layer -> whole llama.cpp names inside blk.N whose parts (a ".weight" part
    # [.., rows, cols] transposed to [.., cols, rows] first, a ".bias" as stored) are interleaved along the last
    # dim: column j of part i lands at j * len(parts) + i (gpt-oss's fused gate_up: gate even, up odd)
    interleaved: dict = field(default_factory=dict)
    # another rule for those parts: join(hf name, parts, meta) -> tensor, join_shape(hf name, part shapes) -> HF
    # shape or None when they disagree (DeepSeek's kv_b from k_b and v_b, Qwen3-Next's in_proj_qkvz)
    join: Callable | None = None
    join_shape: Callable | None = None
    tensor_fields: Callable[[dict], dict] | None = None   # config.json fields told by the tensors present
    partial_rotary: bool = False      # rope.dimension_count below the head dim by design (GGF010 lets it be)
    # folds(source config.json, hf name) -> what the converter multiplied that tensor by (Falcon-H1's muP
    # multipliers), None when unchanged: `llmdoctor diff` compares the source tensor times it
    folds: Callable[[dict, str], object] | None = None


def _layer_kinds(recurrent: str, attention: str) -> Callable[[str, list], dict]:
    """A hybrid's per-layer head_count_kv: 0 on its recurrent layers (convert_hf_to_gguf's LFM2Model,
    GraniteHybridModel), so it says layer_types, in the architecture's own spelling."""
    def per_layer(key: str, values: list) -> dict:
        if key != "attention.head_count_kv":
            return {}
        return {"num_key_value_heads": max(values) or 1,
                "layer_types": [recurrent if v == 0 else attention for v in values]}
    return per_layer


def _lfm2_shape(hf: str, shape: tuple) -> tuple:
    """LFM2's conv taps: llama.cpp stores [C, K], transformers' Conv1d weight is [C, 1, K]."""
    return (shape[0], 1, *shape[1:]) if hf.endswith("conv.conv.weight") else tuple(shape)


def _gemma3_config(raw: dict) -> dict:
    """What llama.cpp hard-codes for gemma3 and Hugging Face writes in config.json: queries scaled by
    head_dim ** -0.5, local (sliding) layers on rope base 10000, one global layer in every six."""
    return {"query_pre_attn_scalar": raw.get("head_dim", 256), "rope_local_base_freq": 10000.0,
            "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh"}


# Qwen3-Next / Qwen3.5 (files/gguf_linear_attn.py): the DeltaNet tensors and metadata, then what differs --
# Qwen3.5's flat projections with tiled value heads, Qwen3-Next's q/k/v/z joined from two tensors and grouped
# b/a; the MoE ones add the stacked experts, the router, the shared expert and its gate
LINEAR_ATTN = dict(config_keys=gguf_linear_attn.CONFIG_KEYS, derive=gguf_linear_attn.derive_config,
                   touches=gguf_linear_attn.touches, hf_shape=gguf_linear_attn.hf_shape, partial_rotary=True)
QWEN35 = dict(LINEAR_ATTN, tensor_names={**gguf_linear_attn.TENSOR_NAMES, **gguf_linear_attn.SPLIT_NAMES},
              finish=gguf_linear_attn.finish)
QWEN_MOE = dict(layer_names=gguf_linear_attn.MOE_NAMES, experts=gguf_mla.EXPERTS,
                config_keys={**gguf_linear_attn.CONFIG_KEYS, **gguf_linear_attn.MOE_KEYS})


def _olmo_config(raw: dict) -> dict:
    """llama.cpp writes OLMo 2 and OLMo 3 as "olmo2"; a sliding window makes it OLMo 3, whose layer kinds come
    from attention.sliding_window_pattern (True = sliding) and whose RoPE scaling applies to the full layers
    only (llama.cpp: rope_freq_scale_train_swa = 1; transformers: the sliding block is plain RoPE)."""
    if not raw.get("sliding_window"):
        return {}
    n, pattern = raw.get("num_hidden_layers", 0), raw.pop("sliding_window_pattern", None)
    if not isinstance(pattern, list) or len(pattern) != n:
        pattern = [(i + 1) % 4 != 0 for i in range(n)]
    theta = raw.get("rope_theta", 10000.0)
    out = {"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3",
           "layer_types": ["sliding_attention" if s else "full_attention" for s in pattern]}
    if raw.get("rope_scaling"):
        out["rope_parameters"] = {"full_attention": {**raw["rope_scaling"], "rope_theta": theta},
                                  "sliding_attention": {"rope_type": "default",
                                                        "rope_theta": raw.pop("rope_theta_swa", theta)}}
    return out


def _llama4_config(raw: dict) -> dict:
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

def _gpt_oss_config(raw: dict) -> dict:
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
    out = {"swiglu_limit": 7.0, "swiglu_alpha": 1.702,
           "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding]}
    scaling = raw.get("rope_scaling")
    if isinstance(scaling, dict) and scaling.get("rope_type") == "yarn":
        out["rope_scaling"] = {**scaling, "truncate": False,
                               **({"beta_fast": beta_fast} if beta_fast is not None else {}),
                               **({"beta_slow": beta_slow} if beta_slow is not None else {})}
    return out


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
    "qwen35moe": GGUFArch("Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", **{**QWEN35, **QWEN_MOE}),
    "qwen3next": GGUFArch("Qwen3NextForCausalLM", "qwen3_next", **{**LINEAR_ATTN, **QWEN_MOE},
                          tensor_names={**gguf_linear_attn.TENSOR_NAMES, **gguf_linear_attn.GROUPED_NAMES},
                          finish=gguf_linear_attn.finish_grouped, transposed=gguf_linear_attn.QKVZ_PARTS,
                          join=gguf_linear_attn.join_qkvz, join_shape=gguf_linear_attn.join_qkvz_shape),
    # LFM2: feed_forward_length is the MLP width after block_auto_adjust_ff_dim; the conv taps are stored [C, K]
    "lfm2": GGUFArch("Lfm2ForCausalLM", "lfm2", config_extra={"block_auto_adjust_ff_dim": False},
                     layer_names={"attn_norm": "operator_norm", "ffn_norm": "ffn_norm", "ffn_gate": "feed_forward.w1",
                                  "ffn_up": "feed_forward.w3", "ffn_down": "feed_forward.w2",
                                  "attn_output": "self_attn.out_proj", "attn_q_norm": "self_attn.q_layernorm",
                                  "attn_k_norm": "self_attn.k_layernorm", "shortconv.conv": "conv.conv",
                                  "shortconv.in_proj": "conv.in_proj", "shortconv.out_proj": "conv.out_proj"},
                     global_names={"token_embd_norm": "model.embedding_norm"},
                     config_keys={"shortconv.l_cache": "conv_L_cache",     # Lfm2Config reads norm_eps only
                                  "attention.layer_norm_rms_epsilon": "norm_eps"},
                     per_layer=_layer_kinds("conv", "full_attention"),
                     hf_shape=_lfm2_shape),
    # Granite 4: Mamba2 layers beside attention; files/gguf_mamba2.py says what the converter changes
    "granitehybrid": GGUFArch("GraniteMoeHybridForCausalLM", "granitemoehybrid", permute_qk=True,
                              layer_names=gguf_mamba2.LAYER_NAMES, tensor_names=gguf_mamba2.MAMBA2_NAMES,
                              transposed=gguf_mamba2.JOINED, join=gguf_mamba2.join, join_shape=gguf_mamba2.join_shape,
                              config_keys=gguf_mamba2.CONFIG_KEYS, derive=gguf_mamba2.derive_config,
                              tensor_fields=gguf_mamba2.tensor_fields, touches=gguf_mamba2.touches,
                              finish=gguf_mamba2.finish, hf_shape=gguf_mamba2.hf_shape,
                              per_layer=_layer_kinds(gguf_mamba2.RECURRENT, gguf_mamba2.ATTENTION)),
    # issue 38. minimax-m2: experts stored stacked, one [experts, rows, cols] tensor per role
    "minimax-m2": GGUFArch("MiniMaxM2ForCausalLM", "minimax_m2", layer_names={"ffn_gate_inp": "block_sparse_moe.gate"},
                           tensor_names={"exp_probs_b.bias": "block_sparse_moe.e_score_correction_bias"},
                           experts={"ffn_gate_exps": "block_sparse_moe.experts.{e}.w1.weight",
                                    "ffn_up_exps": "block_sparse_moe.experts.{e}.w3.weight",
                                    "ffn_down_exps": "block_sparse_moe.experts.{e}.w2.weight"},
                           config_keys={"expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
                                       "expert_feed_forward_length": "intermediate_size",
                                       "rope.dimension_count": "rotary_dim"},
                           partial_rotary=True),        # rotary_dim 64 of head_dim 128 in the released model
    # llama4: interleaved-pair RoPE is llama.cpp's own layout (no Q/K permutation); experts fused and transposed
    "llama4": GGUFArch("Llama4ForCausalLM", "llama4_text",
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
                       derive=_llama4_config),
    # deepseek2 (DeepSeek-V2/V3, Kimi K2) and glm4moe (GLM-4.5): files/gguf_mla.py says what the converter keeps
    "deepseek2": GGUFArch(gguf_mla.V2, "deepseek_v2", layer_names=gguf_mla.MLA_NAMES, experts=gguf_mla.EXPERTS,
                          tensor_names=gguf_mla.ROUTER_BIAS, transposed=gguf_mla.KV_B_PARTS, join=gguf_mla.join_kv_b,
                          join_shape=gguf_mla.join_kv_b_shape, config_keys=gguf_mla.MLA_KEYS,
                          derive=gguf_mla.derive_deepseek2, tensor_fields=gguf_mla.deepseek2_tensor_fields,
                          partial_rotary=True),
    "glm4moe": GGUFArch(gguf_mla.GLM, "glm4_moe", experts=gguf_mla.EXPERTS, tensor_names=gguf_mla.ROUTER_BIAS,
                        layer_names={**gguf_mla.MOE_NAMES, **gguf_mla.NEXTN_NAMES,
                                     "post_attention_norm": "post_attention_layernorm"},
                        config_keys=gguf_mla.MOE_KEYS, derive=gguf_mla.derive_glm4moe,
                        tensor_fields=gguf_mla.glm4moe_tensor_fields, partial_rotary=True),
    # smollm3: NoPE layers are not in the metadata; llama.cpp hard-codes one in 4, the engine's
    # default without no_rope_layers. llama4 and minimax-m2 (stacked expert tensors) are not mapped yet.
    "smollm3": GGUFArch("SmolLM3ForCausalLM", "smollm3", permute_qk=True),
    # gpt-oss: experts stacked and split, gate/up de-interleaved (weights and biases): interleaved back into
    # transformers' fused gate_up; MXFP4 experts are ggml's block_mxfp4 (files/gguf_mxfp4.py)
    "gpt-oss": GGUFArch("GptOssForCausalLM", "gpt_oss",
                        layer_names={"post_attention_norm": "post_attention_layernorm", "ffn_gate_inp": "mlp.router"},
                        tensor_names={"attn_sinks.weight": "self_attn.sinks",
                                      "ffn_down_exps.bias": "mlp.experts.down_proj_bias"},
                        transposed={"mlp.experts.down_proj": ("ffn_down_exps",)},
                        interleaved={"mlp.experts.gate_up_proj": ("ffn_gate_exps.weight", "ffn_up_exps.weight"),
                                     "mlp.experts.gate_up_proj_bias": ("ffn_gate_exps.bias", "ffn_up_exps.bias")},
                        config_keys={"expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
                                     "rope.scaling.yarn_beta_fast": "beta_fast",
                                     "rope.scaling.yarn_beta_slow": "beta_slow",
                                     "attention.sliding_window_pattern": "sliding_window_pattern"},
                        derive=_gpt_oss_config),
    "olmo2": GGUFArch("Olmo2ForCausalLM", "olmo2",
                      layer_names={"post_attention_norm": "post_attention_layernorm",
                                   "post_ffw_norm": "post_feedforward_layernorm"},
                      derive=_olmo_config, config_keys={"attention.sliding_window_pattern": "sliding_window_pattern",
                                                       "rope.freq_base_swa": "rope_theta_swa"}),
    # issue 39. falcon-h1: attention and Mamba2 in every layer, the muP multipliers folded into the weights by the
    # converter (files/gguf_mamba2.py); no Q/K permutation (llama.cpp's NEOX rotary)
    "falcon-h1": GGUFArch("FalconH1ForCausalLM", "falcon_h1", layer_names=gguf_mamba2.FALCON_H1_LAYERS,
                          tensor_names=gguf_mamba2.FALCON_H1_NAMES,
                          global_names={"output_norm": "model.final_layernorm"},
                          config_keys=gguf_mamba2.FALCON_H1_KEYS, derive=gguf_mamba2.falcon_h1_config,
                          tensor_fields=gguf_mamba2.falcon_h1_tensor_fields, touches=gguf_mamba2.touches,
                          finish=gguf_mamba2.finish, hf_shape=gguf_mamba2.hf_shape, folds=gguf_mamba2.falcon_h1_folds),
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
