"""architectures/mla/deepseek.py and architectures/moe/glm4_moe.py without a conversion (the converted models are in
tests/reference_engine/core/test_family_gguf_mla.py): kv_b back from the converter's k_b / v_b split, and the
config fields the deepseek2 / glm4moe metadata leaves out filled in as llama.cpp reads them."""
from __future__ import annotations

import pytest
import torch

from reference_engine.architectures.mla import deepseek as gguf_mla
from reference_engine.architectures.moe import glm4_moe as gguf_glm
from reference_engine.files.gguf_arch import ARCHS, hf_tensor_name


def converter_split(kv_b: torch.Tensor, heads: int, nope: int, v: int):
    """What conversion/deepseek.py DeepseekV2Model.modify_tensors writes for kv_b_proj.weight."""
    kv = kv_b.view(heads, nope + v, kv_b.shape[-1])
    k_b, v_b = torch.split(kv, [nope, v], dim=1)
    return k_b.transpose(1, 2), v_b                       # [H, r, nope], [H, v, r]


def test_kv_b_comes_back_from_its_two_halves():
    heads, nope, v, rank = 3, 5, 7, 11
    kv_b = torch.randn(heads * (nope + v), rank)
    k_b, v_b = converter_split(kv_b, heads, nope, v)
    assert gguf_mla.join_kv_b_shape(gguf_mla.KV_B, [k_b.shape, v_b.shape]) == tuple(kv_b.shape)
    assert torch.equal(gguf_mla.join_kv_b(gguf_mla.KV_B, [k_b, v_b]), kv_b)
    # halves of different models (rank or heads disagree) are refused, not reshaped into something
    assert gguf_mla.join_kv_b_shape(gguf_mla.KV_B, [(3, 11, 5), (3, 7, 12)]) is None
    assert gguf_mla.join_kv_b_shape(gguf_mla.KV_B, [(3, 11, 5), (2, 7, 11)]) is None


def raw(**kw) -> dict:
    base = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 40,
            "rope_dimension_count": 8, "qk_head_dim": 24, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                          "original_max_position_embeddings": 64}}
    return {**base, **kw}


def test_sigmoid_gating_is_v3_and_no_gating_is_v2_as_llama_cpp_defaults():
    v3 = gguf_mla.derive_deepseek2(raw(expert_gating_func=gguf_mla.SIGMOID, n_group=4, topk_group=2))
    assert v3["architectures"] == [gguf_mla.V3] and "topk_method" not in v3
    v2 = gguf_mla.derive_deepseek2(raw())
    assert v2["architectures"] == [gguf_mla.V2] and v2["topk_method"] == "greedy"
    assert gguf_mla.derive_deepseek2(raw(n_group=4, topk_group=2))["topk_method"] == "group_limited_greedy"
    # a V3 config without scoring_func converts with no gating key: its router bias tensors still say V3
    fields = gguf_mla.deepseek2_tensor_fields({"blk.1.exp_probs_b.bias": None, "blk.1.attn_q_a.weight": None})
    assert gguf_mla.derive_deepseek2(raw(**fields))["architectures"] == [gguf_mla.V3]
    assert gguf_mla.derive_deepseek2(raw(**gguf_mla.deepseek2_tensor_fields({})))["architectures"] == [gguf_mla.V2]
    # written only when set: absent is llama.cpp's scale 1 / no renormalisation, and one group
    assert (v2["norm_topk_prob"], v2["routed_scaling_factor"], v2["n_group"], v2["q_lora_rank"]) == \
        (False, 1.0, 1, None)
    assert (v2["num_key_value_heads"], v2["qk_rope_head_dim"], v2["qk_nope_head_dim"]) == (8, 8, 16)


def test_yarn_mscale_is_what_llama_cpp_computes():
    with_mul = gguf_mla.derive_deepseek2(raw(yarn_log_multiplier=0.07))["rope_scaling"]
    assert with_mul["mscale"] == pytest.approx(0.7) == with_mul["mscale_all_dim"]
    # no multiplier: llama.cpp's deepseek2 graph scales neither cos/sin nor the softmax
    without = gguf_mla.derive_deepseek2(raw())["rope_scaling"]
    assert without["attention_factor"] == 1.0 and "mscale_all_dim" not in without


def test_glm4moe_drops_its_nextn_blocks_and_reads_partial_rotary():
    out = gguf_glm.derive_glm4moe({"num_hidden_layers": 47, "nextn_predict_layers": 1, "head_dim": 128,
                                   "rope_dimension_count": 64, "expert_gating_func": gguf_mla.SIGMOID})
    assert out["num_hidden_layers"] == 46 and out["num_nextn_predict_layers"] == 1
    assert out["partial_rotary_factor"] == 0.5
    assert gguf_glm.glm4moe_tensor_fields({"blk.0.attn_q_norm.weight": None}) == {"use_qk_norm": True}


def test_glm4moe_mtp_block_keeps_its_hugging_face_names():
    """blk.L.nextn.* (the converter's names for model.layers.L.eh_proj & co.): under their Hugging Face names the
    engine tolerates them as the MTP layer (core/model_weights.mtp_tensors), as it does from safetensors."""
    glm = ARCHS["glm4moe"]
    assert hf_tensor_name("blk.46.nextn.eh_proj.weight", glm) == "model.layers.46.eh_proj.weight"
    assert hf_tensor_name("blk.46.nextn.shared_head_norm.weight", glm) == "model.layers.46.shared_head.norm.weight"
    assert hf_tensor_name("blk.46.post_attention_norm.weight", glm) == "model.layers.46.post_attention_layernorm.weight"
