"""Qwen3-Next and Qwen3.5 text (dense and MoE): what the files say about them -- their config classes' defaults,
and their GGUF tensors (`qwen3next`, `qwen35`, `qwen35moe`) back in Hugging Face layout: what
convert_hf_to_gguf.py changes in the Gated DeltaNet layers, undone tensor by tensor (and the config.json fields
rebuilt from the `{arch}.ssm.*` and expert metadata).

The converter (conversion/qwen.py, `Qwen3NextModel.modify_tensors` and `_LinearAttentionVReorderBase`):
- stores A = -exp(A_log) as `ssm_a` (so A_log = log(-A)), dt_bias as `ssm_dt.bias`, the conv as [C, K];
- adds 1 to every RMSNorm weight except the DeltaNet's gated norm (zero-centred norms stored as 1 + w);
- Qwen3-Next: splits the per-key-head grouped `in_proj_qkvz` into flat `attn_qkv` (q of every key head, then k,
  then v) and `attn_gate` (z), put back together by `join_qkvz`; keeps `in_proj_ba` as `ssm_ba`; value heads
  stay grouped by key head;
- Qwen3.5 / Qwen3.5-MoE (flat `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a` already): when value heads
  outnumber key heads (r = v_heads / k_heads), reorders value heads from grouped by key head [k0: v0..v(r-1),
  k1: ...] to tiled [v0 of k0, v0 of k1, ..., v1 of k0, ...] in the v rows of `attn_qkv`, the v channels of the
  conv, `attn_gate` (z), `ssm_alpha`/`ssm_beta`, `ssm_a`, `ssm_dt` and the columns of `ssm_out`;
- MoE (both): experts stacked per role (`ffn_*_exps`, gguf_arch's `experts`), the shared expert as `*_shexp`
  and its sigmoid gate as `ffn_gate_inp_shexp`.
"""
from __future__ import annotations

import torch

from reference_engine.architectures.base import ArchitectureData, GGUFArch
from reference_engine.architectures.mla.deepseek import EXPERTS

NEXT, DENSE, MOE = "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"

LINEAR = ".linear_attn."
# llama.cpp name inside blk.N (suffix included) -> Hugging Face name inside model.layers.N: the DeltaNet tensors
# every architecture here stores alike
TENSOR_NAMES = {
    "ssm_a": "linear_attn.A_log", "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_norm.weight": "linear_attn.norm.weight", "ssm_out.weight": "linear_attn.out_proj.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
}
# Qwen3.5's flat input projections, one llama.cpp tensor each
SPLIT_NAMES = {
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight", "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight", "ssm_beta.weight": "linear_attn.in_proj_b.weight",
}
# Qwen3-Next's: b/a kept grouped; q/k/v/z joined from two tensors (gguf_arch's `transposed` parts + `join`)
GROUPED_NAMES = {"ssm_ba.weight": "linear_attn.in_proj_ba.weight"}
QKVZ = "linear_attn.in_proj_qkvz.weight"
QKVZ_PARTS = {QKVZ: ("attn_qkv", "attn_gate")}
# the MoE block's router and shared expert (llama.cpp stem -> Hugging Face name inside model.layers.N)
MOE_NAMES = {"ffn_gate_inp": "mlp.gate", "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
             "ffn_gate_shexp": "mlp.shared_expert.gate_proj", "ffn_up_shexp": "mlp.shared_expert.up_proj",
             "ffn_down_shexp": "mlp.shared_expert.down_proj"}
# {arch}.<key> -> a config.json field (or a raw key derive() turns into one)
CONFIG_KEYS = {"ssm.conv_kernel": "linear_conv_kernel_dim", "ssm.state_size": "linear_key_head_dim",
               "ssm.group_count": "linear_num_key_heads", "ssm.time_step_rank": "linear_num_value_heads",
               "ssm.inner_size": "linear_value_dim", "attention.recurrent_layers": "recurrent_layers",
               "full_attention_interval": "full_attention_interval", "rope.dimension_count": "rope_dimension_count"}
MOE_KEYS = {"expert_count": "num_experts", "expert_used_count": "num_experts_per_tok",
            "expert_feed_forward_length": "moe_intermediate_size",
            "expert_shared_feed_forward_length": "shared_expert_intermediate_size"}


def derive_config(raw: dict) -> dict:
    """linear_value_head_dim, layer_types (from the recurrent-layer flags) and partial_rotary_factor; the raw
    keys they come from (no config.json field of their own) are taken out."""
    out: dict = {}
    inner, v_heads = raw.pop("linear_value_dim", None), raw.get("linear_num_value_heads")
    if isinstance(inner, int) and isinstance(v_heads, int) and v_heads > 0:
        out["linear_value_head_dim"] = inner // v_heads
    flags = raw.pop("recurrent_layers", None)
    if isinstance(flags, list):      # llama.cpp reads the interval only without the flags (the converter writes
        raw.pop("full_attention_interval", None)       # it anyway, 4 when config.json has none): not the model's
        out["layer_types"] = ["linear_attention" if f else "full_attention" for f in flags]
    rot, head_dim = raw.pop("rope_dimension_count", None), raw.get("head_dim")
    if isinstance(rot, int) and isinstance(head_dim, int) and head_dim > 0:
        out["partial_rotary_factor"] = rot / head_dim
    return out


def touches(hf_name: str) -> bool:
    """Whether `finish` changes this tensor (its stored rows are not the Hugging Face ones)."""
    return LINEAR in hf_name or hf_name.endswith("norm.weight")


def hf_shape(hf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], 1, *shape[1:]) if hf_name.endswith("conv1d.weight") else shape


def finish_grouped(hf_name: str, out: torch.Tensor, meta) -> torch.Tensor:
    """`finish` for Qwen3-Next, whose value heads the converter leaves grouped by key head."""
    return finish(hf_name, out, meta, tiled=False)


def join_qkvz_shape(hf_name: str, shapes: list[tuple]) -> tuple | None:
    """attn_qkv [2 key_dim + value_dim, hidden] and attn_gate [value_dim, hidden] -> in_proj_qkvz
    [2 key_dim + 2 value_dim, hidden]; None when they disagree."""
    if hf_name != QKVZ or len(shapes) != 2 or any(len(s) != 2 for s in shapes) or shapes[0][1] != shapes[1][1]:
        return None
    return (shapes[0][0] + shapes[1][0], shapes[0][1])


def join_qkvz(hf_name: str, parts: list[torch.Tensor], meta) -> torch.Tensor:
    """Flat q | k | v rows and z rows -> Qwen3-Next's in_proj_qkvz, grouped per key head: [q_h, k_h, the
    value heads of h's v, their z] for h = 0..k_heads-1 (the inverse of Qwen3NextModel.modify_tensors);
    ValueError when the rows do not split by the metadata's key heads."""
    qkv, z = parts                                            # [2 K dk + V dv, hidden], [V dv, hidden]
    k_heads, k_dim, hidden = meta("ssm.group_count"), meta("ssm.state_size"), qkv.shape[-1]
    if not (isinstance(k_heads, int) and isinstance(k_dim, int) and k_heads > 0 and k_dim > 0) or \
            qkv.shape[0] != 2 * k_heads * k_dim + z.shape[0] or z.shape[0] % k_heads:
        raise ValueError(f"attn_qkv ({qkv.shape[0]} rows) and attn_gate ({z.shape[0]}) do not split into "
                         f"ssm.group_count {k_heads!r} key heads of ssm.state_size {k_dim!r}")
    q, k, v = qkv.split([k_heads * k_dim, k_heads * k_dim, z.shape[0]])
    grouped = [t.reshape(k_heads, -1, hidden) for t in (q, k, v, z)]     # [K, rows per key head, hidden]
    return torch.cat(grouped, dim=1).reshape(-1, hidden).contiguous()   # [K (2 dk + 2 r dv), hidden]


def untile(t: torch.Tensor, dim: int, k_heads: int, r: int, head_dim: int) -> torch.Tensor:
    """Tiled value heads [r, k_heads, head_dim] along dim back to grouped [k_heads, r, head_dim]."""
    shape = list(t.shape)
    t = t.reshape(*shape[:dim], r, k_heads, head_dim, *shape[dim + 1:])
    return t.transpose(dim, dim + 1).reshape(shape)


def finish(hf_name: str, out: torch.Tensor, meta, tiled: bool = True) -> torch.Tensor:
    """The dequantized GGUF tensor as Hugging Face stores it. meta(key) reads `{arch}.<key>`; `tiled`: the
    converter tiled the value heads (Qwen3.5), else they stayed grouped (Qwen3-Next)."""
    if hf_name.endswith("norm.weight") and LINEAR not in hf_name:
        return out - 1.0
    if LINEAR not in hf_name:
        return out
    k_heads, v_heads = meta("ssm.group_count"), meta("ssm.time_step_rank")
    k_dim, v_dim = meta("ssm.state_size"), meta("ssm.inner_size") // v_heads
    r = v_heads // k_heads
    if hf_name.endswith("A_log"):
        out = torch.log(-out)
    if tiled and r > 1:
        out = _grouped(hf_name, out, k_heads, r, k_dim, v_dim)
    return out[:, None, :] if hf_name.endswith("conv1d.weight") else out


def _grouped(hf_name: str, out: torch.Tensor, k_heads: int, r: int, k_dim: int, v_dim: int) -> torch.Tensor:
    qk = 2 * k_heads * k_dim
    if hf_name.endswith(("in_proj_qkv.weight", "conv1d.weight")):      # only the v rows / channels
        return torch.cat([out[:qk], untile(out[qk:], 0, k_heads, r, v_dim)])
    if hf_name.endswith("in_proj_z.weight"):
        return untile(out, 0, k_heads, r, v_dim)
    if hf_name.endswith(("in_proj_a.weight", "in_proj_b.weight", "A_log", "dt_bias")):
        return untile(out, 0, k_heads, r, 1)
    if hf_name.endswith("out_proj.weight"):
        return untile(out, 1, k_heads, r, v_dim)
    return out


# the DeltaNet tensors and metadata, then what differs -- Qwen3.5's flat projections with tiled value heads,
# Qwen3-Next's q/k/v/z joined from two tensors and grouped b/a; the MoE ones add the stacked experts, the
# router, the shared expert and its gate
LINEAR_ATTN = dict(config_keys=CONFIG_KEYS, derive=derive_config, touches=touches, hf_shape=hf_shape,
                   partial_rotary=True)
QWEN35 = dict(LINEAR_ATTN, tensor_names={**TENSOR_NAMES, **SPLIT_NAMES}, finish=finish)
QWEN_MOE = dict(layer_names=MOE_NAMES, experts=EXPERTS, config_keys={**CONFIG_KEYS, **MOE_KEYS})
# Qwen3-Next (and Qwen3.5, built on it) rotate a quarter of each head
QUARTER = {"partial_rotary_factor": 0.25}

DATA = ArchitectureData(
    "qwen3_next", (NEXT, DENSE, MOE),
    model_types={"qwen3_next": NEXT, "qwen3_5_text": DENSE, "qwen3_5_moe_text": MOE},
    class_defaults={"qwen3_next": QUARTER, "qwen3_5_text": QUARTER, "qwen3_5_moe_text": QUARTER},
    gguf={"qwen35": GGUFArch(DENSE, "qwen3_5_text", **QWEN35),
          "qwen35moe": GGUFArch(MOE, "qwen3_5_moe_text", **{**QWEN35, **QWEN_MOE}),
          "qwen3next": GGUFArch(NEXT, "qwen3_next", **{**LINEAR_ATTN, **QWEN_MOE},
                                tensor_names={**TENSOR_NAMES, **GROUPED_NAMES}, finish=finish_grouped,
                                transposed=QKVZ_PARTS, join=join_qkvz, join_shape=join_qkvz_shape)},
    recurrent="gated_delta_net")
