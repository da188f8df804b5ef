"""GLM-4.5 / GLM-4.6 (Glm4MoeForCausalLM): what the files say about it. DeepSeek-V3's MoE under GQA attention
(its MoE tensors and GGUF keys: mla/deepseek.py), q/k/v biases, optional per-head q/k norms, partial rotary
(0.5 when absent, as Glm4MoeConfig). Its GGUF (`glm4moe`): q/k/v biases, q/k norms (`attn_q_norm`/
`attn_k_norm`), shared experts, leading dense blocks, sigmoid routing; rope.dimension_count = head_dim *
partial_rotary_factor; no q/k permutation (NeoX rotary); the MTP (nextn) layers written as extra blocks after
num_hidden_layers, which the engine does not run."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch
from reference_engine.architectures.mla.deepseek import EXPERTS, MOE_KEYS, MOE_NAMES, ROUTER_BIAS, moe_fields

GLM = "Glm4MoeForCausalLM"
# transformers' Glm4MoeConfig defaults of the MoE fields it shares with DeepSeek-V3
DEFAULTS = dict(n_routed_experts=128, n_shared_experts=1, moe_intermediate_size=1408, first_k_dense_replace=1,
                routed_scaling_factor=1.0, n_group=1, topk_group=1)
# GLM-4.5's MTP block (a layer after num_hidden_layers, tolerated and not run: core/model_weights.mtp_tensors)
NEXTN_NAMES = {"nextn.eh_proj": "eh_proj", "nextn.embed_tokens": "embed_tokens", "nextn.enorm": "enorm",
               "nextn.hnorm": "hnorm", "nextn.shared_head_head": "shared_head.head",
               "nextn.shared_head_norm": "shared_head.norm"}


def derive_glm4moe(raw: dict) -> dict:
    rope, head_dim = raw.pop("rope_dimension_count", None), raw.get("head_dim")
    raw.pop("expert_gating_func", None)                                # always sigmoid (noaux_tc)
    out = moe_fields(raw)
    if isinstance(rope, int) and isinstance(head_dim, int) and head_dim > 0:
        out["partial_rotary_factor"] = rope / head_dim
    return out


def glm4moe_tensor_fields(tensors: dict) -> dict:
    """use_qk_norm: whether the q/k norms are there (no metadata key says it)."""
    return {"use_qk_norm": "blk.0.attn_q_norm.weight" in tensors}


GGUF = GGUFArch(GLM, "glm4_moe", experts=EXPERTS, tensor_names=ROUTER_BIAS,
                layer_names={**MOE_NAMES, **NEXTN_NAMES, "post_attention_norm": "post_attention_layernorm"},
                config_keys=MOE_KEYS, derive=derive_glm4moe, tensor_fields=glm4moe_tensor_fields, partial_rotary=True)

DATA = ArchitectureData("glm4_moe", (GLM,), model_types={"glm4_moe": GLM},
                        class_defaults={"glm4_moe": {"partial_rotary_factor": 0.5}}, gguf={"glm4moe": GGUF})
