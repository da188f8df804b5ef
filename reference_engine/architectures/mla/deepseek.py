"""DeepSeek-V2 / V3 (and Kimi K2, DeepSeek-V2-Lite): what the files say about them -- transformers' defaults for
the MLA and MoE fields, and their GGUF files (`deepseek2`) back in Hugging Face terms: tensor names, the kv_b
projection the converter split in two, and the config.json fields rebuilt from the metadata. GLM-4.5
(moe/glm4_moe.py) shares the MoE tensors and keys.

What the pinned convert_hf_to_gguf.py (conversion/deepseek.py DeepseekV2Model, conversion/glm.py Glm4MoeModel)
writes, and what is lost:
- deepseek2: kv_b_proj [H * (nope + v), r] split per head into `attn_k_b` = k rows transposed, stored [H, r, nope],
  and `attn_v_b` [H, v, r] (llama.cpp's weight absorption); put back together by `join_kv_b`. head_count_kv is 1
  (MLA written as MQA) and key_length is r + rope: the Hugging Face fields come from key_length_mla (nope + rope),
  value_length_mla (v), rope.dimension_count (rope), q_lora_rank (absent: a plain q_proj, DeepSeek-V2-Lite).
- YaRN: of mscale / mscale_all_dim only `yarn_log_multiplier` = 0.1 * mscale_all_dim is kept. llama.cpp's
  deepseek2 graph cancels the cos/sin attention factor and multiplies the softmax scale by
  (1 + 0.1 * mscale_all_dim * ln factor) ** 2: exactly transformers' arithmetic when mscale == mscale_all_dim
  (cos/sin factor mscale(mscale) / mscale(mscale_all_dim) = 1; every DeepSeek-V2/V3 and Kimi K2 checkpoint ships
  them equal), so the config says mscale = mscale_all_dim; without the key, attention_factor 1 (no scaling at all,
  as llama.cpp). A checkpoint with mscale != mscale_all_dim cannot be told from its GGUF.
- Router: expert_gating_func sigmoid, or `exp_probs_b` tensors (= e_score_correction_bias, which only V3 has: a
  config without `scoring_func`, as transformers' DeepseekV3Config writes, converts without the gating key and
  llama.cpp would softmax it), is V3's noaux_tc; otherwise V2 (llama.cpp's default, softmax),
  group_limited_greedy when expert_group_count > 1 (llama.cpp ranks groups by their two best experts,
  transformers' V2 by the best one) else greedy. norm_topk_prob and routed_scaling_factor are written only when
  set: absent means False / 1.0. moe_layer_freq is not stored (1 assumed, as llama.cpp).
- RoPE layout: llama.cpp's deepseek2 rotates interleaved pairs and the converter does not permute, so the GGUF
  is `rope_interleave` True (a rotate-half checkpoint, Kimi K2 with rope_interleave false, reads as interleaved).
- MTP (nextn) layers: deepseek2 drops them; glm4moe writes them as extra blocks after num_hidden_layers
  (nextn_predict_layers), which the engine does not run: block_count minus those is the decoder's depth.
- glm4moe: q/k/v biases, q/k norms (`attn_q_norm`/`attn_k_norm`), shared experts, leading dense blocks, sigmoid
  routing; rope.dimension_count = head_dim * partial_rotary_factor; no q/k permutation (NeoX rotary).
"""
from __future__ import annotations

import torch

from reference_engine.architectures.base import ArchitectureData, GGUFArch

V2, V3 = "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"
# transformers' defaults (DeepseekV2Config / DeepseekV3Config): a field absent from config.json takes these
DEFAULTS = {
    V2: dict(kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
             n_routed_experts=64, n_shared_experts=2, moe_intermediate_size=1407, first_k_dense_replace=0,
             routed_scaling_factor=1.0, n_group=None, topk_group=None),
    V3: dict(kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
             n_routed_experts=256, n_shared_experts=1, moe_intermediate_size=2048, first_k_dense_replace=3,
             routed_scaling_factor=2.5, n_group=8, topk_group=4),
}
SIGMOID = 2                       # gguf.ExpertGatingFuncType.SIGMOID (SOFTMAX is 1)

# llama.cpp stem inside blk.N -> Hugging Face name inside model.layers.N (both families' MoE MLP)
MOE_NAMES = {"ffn_gate_inp": "mlp.gate", "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
             "ffn_up_shexp": "mlp.shared_experts.up_proj", "ffn_down_shexp": "mlp.shared_experts.down_proj"}
EXPERTS = {"ffn_gate_exps": "mlp.experts.{e}.gate_proj.weight", "ffn_up_exps": "mlp.experts.{e}.up_proj.weight",
           "ffn_down_exps": "mlp.experts.{e}.down_proj.weight"}
ROUTER_BIAS = {"exp_probs_b.bias": "mlp.gate.e_score_correction_bias"}
MLA_NAMES = {**MOE_NAMES, "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm",
             "attn_q_b": "self_attn.q_b_proj", "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
             "attn_kv_a_norm": "self_attn.kv_a_layernorm", "attn_kv_b": "self_attn.kv_b_proj"}
KV_B = "self_attn.kv_b_proj.weight"
KV_B_PARTS = {KV_B: ("attn_k_b", "attn_v_b")}

# {arch}.<key> -> config.json field (or a raw key derive_* turns into one), shared by both families
MOE_KEYS = {"expert_count": "n_routed_experts", "expert_used_count": "num_experts_per_tok",
            "expert_group_count": "n_group", "expert_group_used_count": "topk_group",
            "expert_feed_forward_length": "moe_intermediate_size", "expert_shared_count": "n_shared_experts",
            "leading_dense_block_count": "first_k_dense_replace", "expert_weights_scale": "routed_scaling_factor",
            "expert_weights_norm": "norm_topk_prob", "expert_gating_func": "expert_gating_func",
            "rope.dimension_count": "rope_dimension_count", "nextn_predict_layers": "nextn_predict_layers",
            "rope.scaling.yarn_beta_fast": "yarn_beta_fast", "rope.scaling.yarn_beta_slow": "yarn_beta_slow"}
MLA_KEYS = {**MOE_KEYS, "attention.q_lora_rank": "q_lora_rank", "attention.kv_lora_rank": "kv_lora_rank",
            "attention.key_length_mla": "qk_head_dim", "attention.value_length_mla": "v_head_dim",
            "rope.scaling.yarn_log_multiplier": "yarn_log_multiplier"}


def join_kv_b_shape(hf_name: str, shapes: list[tuple]) -> tuple | None:
    """k_b [H, r, nope] and v_b [H, v, r] -> kv_b [H * (nope + v), r]; None when they disagree."""
    (heads, rank, nope), (heads_v, v, rank_v) = (tuple(s) if len(s) == 3 else (0, -1, -2) for s in shapes)
    return (heads * (nope + v), rank) if heads == heads_v and rank == rank_v and heads > 0 else None


def join_kv_b(hf_name: str, parts: list[torch.Tensor], meta=None) -> torch.Tensor:
    k_b, v_b = parts                                                  # [H, r, nope], [H, v, r]
    kv = torch.cat([k_b.transpose(1, 2), v_b], dim=1)                 # [H, nope + v, r]
    return kv.reshape(-1, kv.shape[-1]).contiguous()                  # [H * (nope + v), r]


def moe_fields(raw: dict) -> dict:
    """The router fields both families share; the converter writes norm/scale only when set, groups only when
    the config has them; the nextn blocks are not decoder layers."""
    layers = raw.get("num_hidden_layers")
    nextn = raw.pop("nextn_predict_layers", 0) or 0
    out = {"n_group": raw.get("n_group") or 1, "topk_group": raw.get("topk_group") or 1,
           "norm_topk_prob": bool(raw.get("norm_topk_prob", False)),
           "routed_scaling_factor": raw.get("routed_scaling_factor", 1.0)}
    if isinstance(layers, int) and isinstance(nextn, int) and 0 < nextn < layers:
        out.update(num_hidden_layers=layers - nextn, num_nextn_predict_layers=nextn)
    return out


def _yarn(raw: dict) -> dict:
    """rope_scaling as transformers would read the checkpoint llama.cpp assumes (module docstring: YaRN)."""
    scaling, log_mul = raw.get("rope_scaling"), raw.pop("yarn_log_multiplier", None)
    beta = {"beta_fast": raw.pop("yarn_beta_fast", 32.0), "beta_slow": raw.pop("yarn_beta_slow", 1.0)}
    if not isinstance(scaling, dict) or scaling.get("rope_type") != "yarn":
        return {}
    if isinstance(log_mul, (int, float)):
        mscale = float(log_mul) / 0.1
        return {"rope_scaling": {**scaling, **beta, "mscale": mscale, "mscale_all_dim": mscale}}
    return {"rope_scaling": {**scaling, **beta, "attention_factor": 1.0}}


def derive_deepseek2(raw: dict) -> dict:
    rope = raw.pop("rope_dimension_count", None)
    qk = raw.pop("qk_head_dim", None) or raw.get("head_dim")        # older GGUFs: key_length is nope + rope
    v3 = (raw.pop("expert_gating_func", None) == SIGMOID) | bool(raw.pop("router_bias", False))
    out = {**moe_fields(raw), **_yarn(raw), "architectures": [V3 if v3 else V2],
           "model_type": "deepseek_v3" if v3 else "deepseek_v2", "rope_interleave": True,
           "num_key_value_heads": raw.get("num_attention_heads"), "q_lora_rank": raw.get("q_lora_rank")}
    if isinstance(rope, int) and isinstance(qk, int):
        out.update(qk_rope_head_dim=rope, qk_nope_head_dim=qk - rope, head_dim=rope)
    if not v3:
        out["topk_method"] = "group_limited_greedy" if out["n_group"] > 1 else "greedy"
    return out


def deepseek2_tensor_fields(tensors: dict) -> dict:
    """attention_bias (q_a / kv_a / o biases) and V2's mlp_bias (dense and shared-expert MLP biases): no
    metadata key says them."""
    mlp = any(n.startswith("blk.") and n.split(".")[2] in ("ffn_down", "ffn_down_shexp") and n.endswith(".bias")
              for n in tensors)
    router_bias = any(n.endswith(".exp_probs_b.bias") for n in tensors)
    return {"attention_bias": "blk.0.attn_kv_a_mqa.bias" in tensors, "mlp_bias": mlp, "router_bias": router_bias}


GGUF = GGUFArch(V2, "deepseek_v2", layer_names=MLA_NAMES, experts=EXPERTS, tensor_names=ROUTER_BIAS,
                transposed=KV_B_PARTS, join=join_kv_b, join_shape=join_kv_b_shape, config_keys=MLA_KEYS,
                derive=derive_deepseek2, tensor_fields=deepseek2_tensor_fields, partial_rotary=True)

DATA = ArchitectureData(
    "deepseek", (V2, V3), model_types={"deepseek_v2": V2, "kimi_k2": V3, "deepseek_v3": V3},
    # head_dim is the rope key's width (DeepseekV2/V3Config.__post_init__ sets it), what the RoPE table rotates;
    # the default when qk_rope_head_dim is absent
    rope_head_dim={V2: DEFAULTS[V2]["qk_rope_head_dim"], V3: DEFAULTS[V3]["qk_rope_head_dim"]},
    gguf={"deepseek2": GGUF})
