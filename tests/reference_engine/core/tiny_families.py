"""Every tiny model family the core tests build, in one place: each kind's base config, the way its weights are
drawn (tests/reference_engine/core/tiny_models.py's DRAWS) and its variants, each named by what it covers. A variant
is (transformers config class, model class, overrides of the base)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

VOCAB = 97


@dataclass(frozen=True)
class Kind:
    """Variants built alike: one base config, one way to draw the weights, one path for the transformers oracle."""
    base: dict
    draws: str                                  # a key of tiny_models.DRAWS
    variants: dict[str, tuple[str, str, dict]]
    attention: str | None = "eager"             # the oracle's attn_implementation (None: transformers' default)
    experts: str | None = None                  # the oracle's experts implementation (None: transformers' default)
    tokenizer_ids: dict = field(default_factory=dict)   # config ids beside a copied tokenizer (GGUF export)
    pad_row_drawn: bool = False                 # beside a tokenizer, the pad row drawn (nn.Embedding zeroes it)


BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LONGROPE = dict(rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=64,
                short_factor=[1.0 + 0.1 * i for i in range(3)], long_factor=[1.5 + 0.5 * i for i in range(3)])

# Gemma 2/3, Phi-3/3.5/4-mini, Mixtral, Qwen2/3-MoE, OLMoE, Llama dynamic NTK: tied/untied, GQA ratio, sliding
# layout, RoPE kind (norms drawn as offsets from 1 for Gemma)
CLASSIC = Kind(base=BASE, draws="plain", variants={
    "gemma2_gqa2_tied_softcap": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_key_value_heads=2, head_dim=16, sliding_window=24, query_pre_attn_scalar=24,
        attn_logit_softcapping=3.0, final_logit_softcapping=5.0)),
    "gemma2_mha_untied_nocap": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_key_value_heads=4, head_dim=8, sliding_window=16, tie_word_embeddings=False, num_hidden_layers=3,
        attn_logit_softcapping=None, final_logit_softcapping=None)),
    "gemma3_gqa4_tied_5to1": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_attention_heads=8, num_key_value_heads=2, head_dim=32, sliding_window=20, num_hidden_layers=6,
        layer_types=["sliding_attention"] * 5 + ["full_attention"])),
    "gemma3_mqa_untied_linear_global": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_key_value_heads=1, head_dim=16, sliding_window=12, tie_word_embeddings=False, num_hidden_layers=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    "phi3_gqa2_untied": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=2)),
    "phi3_mha_window": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=4, sliding_window=40)),
    # original_max_position_embeddings also at the top level: transformers' Phi3Config otherwise writes its
    # default (4096) into rope_parameters and the long factors never apply
    "phi35_longrope": ("Phi3Config", "Phi3ForCausalLM", dict(
        num_key_value_heads=2, hidden_size=48, original_max_position_embeddings=64,
        rope_parameters={**LONGROPE, "short_factor": [1.0] * 6, "long_factor": [1.0 + i for i in range(6)]})),
    "phi4mini_longrope_partial_tied": ("Phi3Config", "Phi3ForCausalLM", dict(
        num_key_value_heads=2, tie_word_embeddings=True, hidden_size=64, num_attention_heads=4,
        original_max_position_embeddings=64,
        rope_parameters={**LONGROPE, "partial_rotary_factor": 0.75, "short_factor": [1.0 + 0.05 * i for i in range(6)],
                         "long_factor": [1.0 + 0.7 * i for i in range(6)]})),
    "mixtral_gqa2": ("MixtralConfig", "MixtralForCausalLM", dict(
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, head_dim=8)),
    "mixtral_window_top1_tied": ("MixtralConfig", "MixtralForCausalLM", dict(
        num_key_value_heads=4, num_local_experts=3, num_experts_per_tok=1, sliding_window=32, head_dim=8,
        tie_word_embeddings=True)),
    "qwen2moe_shared_sparse_step": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=40, num_hidden_layers=3, decoder_sparse_step=1, mlp_only_layers=[1])),
    "qwen3moe_normtopk_tied": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        num_key_value_heads=1, num_experts=5, num_experts_per_tok=3, moe_intermediate_size=24, head_dim=12,
        norm_topk_prob=True, tie_word_embeddings=True)),
    "olmoe_clip": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        num_key_value_heads=4, num_experts=4, num_experts_per_tok=2, clip_qkv=2.0)),
    "llama_dynamic_ntk": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_key_value_heads=2, max_position_embeddings=128,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})),
})

# SmolLM3, OLMo 2/3, MiniMax-M2, Llama 4 text, scaled so that every feature bites at the tests' lengths: NoPE
# layers beside RoPE layers, windows and chunks shorter than the sequences, routers whose choice differs from
# token to token
NOPE_ROUTED = Kind(base=BASE, draws="routed", variants={
    "smollm3_nope_gqa": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        num_hidden_layers=4, num_key_value_heads=2, no_rope_layers=[1, 0, 1, 0], tie_word_embeddings=True)),
    "smollm3_window_interval": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        num_hidden_layers=4, num_key_value_heads=1, no_rope_layer_interval=2, use_sliding_window=True,
        sliding_window=24, tie_word_embeddings=False, mlp_bias=True)),
    "olmo2_post_norm": ("Olmo2Config", "Olmo2ForCausalLM", dict(num_key_value_heads=2, num_hidden_layers=3)),
    "olmo3_windows_yarn": ("Olmo3Config", "Olmo3ForCausalLM", dict(
        num_key_value_heads=2, num_hidden_layers=4, sliding_window=20,
        rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                            "original_max_position_embeddings": 64},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    # rope_theta 500000 on both kinds, as the released OLMo 3 (transformers reads a flat config's sliding base
    # as Olmo3Config's default 500000, whatever rope_theta says)
    "olmo3_flat_yarn": ("Olmo3Config", "Olmo3ForCausalLM", dict(
        num_key_value_heads=2, num_hidden_layers=4, sliding_window=20,
        rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 500000.0,
                                            "original_max_position_embeddings": 64},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0}})),
    "minimax_m2_partial_rotary": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM", dict(
        num_key_value_heads=2, head_dim=16, rotary_dim=8, num_local_experts=6, num_experts_per_tok=2,
        intermediate_size=24)),
    "llama4_chunked_nope_moe": ("Llama4TextConfig", "Llama4ForCausalLM", dict(
        num_hidden_layers=4, num_key_value_heads=2, head_dim=8, intermediate_size=24, intermediate_size_mlp=40,
        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2, attention_chunk_size=16,
        no_rope_layers=[1, 1, 0, 1], floor_scale=8, attn_scale=0.5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
})

# DeepSeek-V2/V3 (MLA) and GLM-4.5: YaRN with mscale != mscale_all_dim and positions past
# original_max_position_embeddings (64), q LoRA and plain q_proj, interleaved and rotate-half rope, routers whose
# choice (experts and groups) changes from token to token, first_k_dense_replace > 0, attention and MLP biases
MLA_BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                initializer_range=0.15, pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64, beta_fast=32,
            beta_slow=1)

MLA_MOE = Kind(base=MLA_BASE, draws="plain", variants={
    "dsv3_qlora_yarn_groups": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        **MLA, q_lora_rank=24, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
        n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        rope_interleave=True, rope_parameters={**YARN, "mscale": 1.0, "mscale_all_dim": 0.7})),
    "kimi_k2_no_qlora_rotate_half": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        **MLA, q_lora_rank=None, n_routed_experts=6, n_group=1, topk_group=1, num_experts_per_tok=2,
        n_shared_experts=2, first_k_dense_replace=1, routed_scaling_factor=2.827, norm_topk_prob=True,
        rope_interleave=False, rope_parameters={**YARN, "factor": 2.0, "original_max_position_embeddings": 128,
                                               "mscale": 1.0, "mscale_all_dim": 1.0})),
    "dsv2_lite_greedy": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        **MLA, q_lora_rank=None, n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=2,
        first_k_dense_replace=1, topk_method="greedy", routed_scaling_factor=1.0,
        rope_parameters={**YARN, "mscale": 0.707, "mscale_all_dim": 0.9})),
    "dsv2_group_limited_bias": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        **MLA, q_lora_rank=20, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
        n_shared_experts=1, first_k_dense_replace=2, num_hidden_layers=4, topk_method="group_limited_greedy",
        routed_scaling_factor=16.0, attention_bias=True, mlp_bias=True, rope_parameters={"rope_type": "default",
                                                                                        "rope_theta": 10000.0})),
    "glm45_qknorm_groups_bias": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(
        num_key_value_heads=2, head_dim=16, n_routed_experts=8, n_group=2, topk_group=1, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        use_qk_norm=True, attention_bias=True, partial_rotary_factor=0.5)),
    "glm45_plain_one_group": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(
        num_key_value_heads=1, n_routed_experts=5, n_group=1, topk_group=1, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=2, routed_scaling_factor=1.0, norm_topk_prob=False,
        use_qk_norm=False, attention_bias=False)),
})

# LFM2, Granite 4, Falcon-H1 (transformers' torch path, no custom kernels): conv filters large enough to carry the
# window, Mamba2 decays exp(dt * A) spread over ~0.3..0.9, chunks shorter than the test sequences
HYBRID_BASE = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                   max_position_embeddings=512, initializer_range=0.1, pad_token_id=0, bos_token_id=1,
                   eos_token_id=2)
MAMBA = dict(mamba_n_heads=4, mamba_n_groups=2, mamba_d_state=8, mamba_d_head=16, mamba_expand=2,
             mamba_chunk_size=8, mamba_d_conv=4)
FALCON_MULTIPLIERS = dict(embedding_multiplier=1.7, lm_head_multiplier=0.6, key_multiplier=0.7,
                          attention_in_multiplier=1.3, attention_out_multiplier=0.8, ssm_in_multiplier=1.2,
                          ssm_out_multiplier=0.9, ssm_multipliers=[0.8, 1.2, 1.4, 0.7, 1.3], mlp_multipliers=[1.3, 0.7])

SMOLLM2_IDS = dict(vocab_size=49152, bos_token_id=1, eos_token_id=2, pad_token_id=2)
HYBRID = Kind(base=HYBRID_BASE, draws="state", attention=None, tokenizer_ids=SMOLLM2_IDS, pad_row_drawn=True,
              variants={
    "lfm2_conv3_attn1": ("Lfm2Config", "Lfm2ForCausalLM", dict(
        intermediate_size=48, num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "conv"],
        conv_L_cache=4, block_multiple_of=8, block_ffn_dim_multiplier=1.5)),
    "lfm2_bias_untied_no_adjust": ("Lfm2Config", "Lfm2ForCausalLM", dict(
        intermediate_size=40, num_hidden_layers=3, layer_types=["full_attention", "conv", "conv"], conv_L_cache=3,
        conv_bias=True, tie_word_embeddings=False, block_auto_adjust_ff_dim=False)),
    "granite4_moe_rope": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "mamba"],
        num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=40, position_embedding_type="rope",
        embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=3.0, **MAMBA)),
    "granite4_dense_nope_1group": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=3, layer_types=["mamba", "mamba", "attention"],
        num_local_experts=0, shared_intermediate_size=48, position_embedding_type=None, tie_word_embeddings=True,
        embedding_multiplier=1.5, residual_multiplier=0.7, attention_multiplier=0.25, logits_scaling=2.0,
        **{**MAMBA, "mamba_n_groups": 1, "mamba_chunk_size": 5, "mamba_d_conv": 3})),
    # Falcon-H1: attention and Mamba2 side by side in every layer, every muP multiplier away from 1
    "falcon_h1_norm_before_gate": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        intermediate_size=40, num_hidden_layers=3, head_dim=16, **FALCON_MULTIPLIERS,
        **{**MAMBA, "mamba_d_ssm": 48, "mamba_d_head": 12}, mamba_rms_norm=True, mamba_norm_before_gate=True)),
    "falcon_h1_norm_after_gate": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=2, head_dim=8, **FALCON_MULTIPLIERS, **{**MAMBA, "mamba_d_ssm": 64},
        mamba_rms_norm=True, mamba_norm_before_gate=False)),
    "falcon_h1_gate_biases_tied": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=2, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
        projectors_bias=True, mamba_proj_bias=True, mamba_rms_norm=False, **FALCON_MULTIPLIERS,
        **{**MAMBA, "mamba_d_ssm": None, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_chunk_size": 5,
           "mamba_d_conv": 3})),
})

# Qwen3-Next / Qwen3.5 text (transformers' torch path: no fla, no causal-conv1d): decays exp(g) over ~0.3..0.95,
# the zero-centred norms around 0, the gated norm around 1; GQA-style value heads (4 per 2 key heads) or not,
# layer kinds from layer_types or the interval, MoE with dense layers, tied embeddings
DELTA_NET_BASE = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=512, initializer_range=0.1, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=12)
DELTA_NET = Kind(base=DELTA_NET_BASE, draws="delta_net", attention=None, tokenizer_ids=dict(pad_token_id=None),
                 variants={
    "next_moe_interval": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        num_hidden_layers=4, intermediate_size=48, linear_num_key_heads=2, linear_num_value_heads=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        mlp_only_layers=[1], full_attention_interval=2)),
    "qwen35_dense_tied": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        num_hidden_layers=3, intermediate_size=40, linear_num_key_heads=2, linear_num_value_heads=2,
        tie_word_embeddings=True, layer_types=["linear_attention", "full_attention", "linear_attention"])),
    "qwen35_dense_value_groups": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        num_hidden_layers=4, intermediate_size=40, linear_num_key_heads=2, linear_num_value_heads=6)),
    "qwen35_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(
        num_hidden_layers=4, linear_num_key_heads=1, linear_num_value_heads=3, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24)),
})
# the same, for GGUF export only (built beside a real tokenizer), value heads as large as key heads (llama.cpp's loader
# assumes it: GGF030): Qwen3-Next with every layer MoE (the pinned converter cannot map a dense Qwen3-Next
# layer's mlp); Qwen3.5-MoE with 4 value heads over 2 key heads (the converter tiles them), tied (Qwen's
# 152k-row vocabulary)
DELTA_NET_FOR_GGUF = replace(DELTA_NET, variants={
    "next_moe_gguf": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        num_hidden_layers=4, intermediate_size=48, linear_num_key_heads=2, linear_num_value_heads=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        full_attention_interval=2, linear_value_head_dim=8)),
    "qwen35_moe_gguf": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(
        num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        linear_value_head_dim=8, tie_word_embeddings=True,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"])),
})

# gpt-oss, weights scaled so that every detail changes the logits: large sinks, a window shorter than the prompts,
# YaRN with positions past original_max_position_embeddings, router logits spread enough that tokens pick different
# experts, gate/up activations well past `swiglu_limit` so the clamp bites
GPT_OSS_BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=6,
                    num_experts_per_tok=2, sliding_window=8, max_position_embeddings=256, swiglu_limit=1.5,
                    initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5,
                    rope_parameters={"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                     "truncate": False, "original_max_position_embeddings": 32,
                                     "rope_theta": 150000.0})
GPT_OSS = Kind(base=GPT_OSS_BASE, draws="sinks", experts="eager",
               variants={"gpt_oss": ("GptOssConfig", "GptOssForCausalLM", {})})

KINDS = (CLASSIC, NOPE_ROUTED, MLA_MOE, HYBRID, DELTA_NET, DELTA_NET_FOR_GGUF, GPT_OSS)
