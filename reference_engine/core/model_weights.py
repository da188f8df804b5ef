"""The decoder's tensors, loaded from safetensors by Hugging Face name, checked and cast once.

Every tensor the architecture needs must be present with exactly the expected shape; a missing,
unexpected or mis-shaped tensor is a one-line ModelDirError naming it. Q/K/V and gate/up projections are
concatenated once at load time so that a layer runs two matmuls fewer per step.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from reference_engine.config import ModelConfig
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.weights import Weights

FLOAT_DTYPES = {"F32", "F16", "BF16", "F64"}
# stored by some older checkpoints, recomputed by every implementation
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass
class LayerWeights:
    input_norm: torch.Tensor          # [hidden]
    post_norm: torch.Tensor           # [hidden]
    qkv: torch.Tensor                 # [(heads + 2 * kv_heads) * head_dim, hidden]
    qkv_bias: torch.Tensor | None     # [(heads + 2 * kv_heads) * head_dim]
    q_norm: torch.Tensor | None       # [head_dim] (Qwen3)
    k_norm: torch.Tensor | None       # [head_dim]
    o: torch.Tensor                   # [hidden, heads * head_dim]
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor             # [2 * intermediate, hidden]
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor                # [hidden, intermediate]
    down_bias: torch.Tensor | None
    qk_norm: torch.Tensor | None = None   # [heads + kv_heads, head_dim]: q_norm and k_norm per head, one op for both


@dataclass
class ModelWeights:
    embed: torch.Tensor               # [vocab, hidden]
    layers: list[LayerWeights]
    norm: torch.Tensor                # [hidden]
    lm_head: torch.Tensor             # [vocab, hidden]; the embedding itself when tied


def bias_layout(config: ModelConfig) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o_proj bias, MLP bias) as each architecture's transformers class builds them."""
    arch = config.architecture
    if arch == "Qwen2ForCausalLM":
        return True, False, False
    if arch == "MistralForCausalLM":
        return False, False, False
    mlp_bias = arch == "LlamaForCausalLM" and bool(config.raw.get("mlp_bias", False))
    return config.attention_bias, config.attention_bias, mlp_bias


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    h, d, i = config.hidden_size, config.head_dim, config.intermediate_size
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    qkv_bias, o_bias, mlp_bias = bias_layout(config)
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, h),
                                          "model.norm.weight": (h,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for n in range(config.num_hidden_layers):
        p = f"model.layers.{n}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (q_out, h), p + "self_attn.k_proj.weight": (kv_out, h),
                       p + "self_attn.v_proj.weight": (kv_out, h), p + "self_attn.o_proj.weight": (h, q_out),
                       p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                       p + "mlp.down_proj.weight": (h, i)})
        if qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q_out,), p + "self_attn.k_proj.bias": (kv_out,),
                           p + "self_attn.v_proj.bias": (kv_out,)})
        if o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        if mlp_bias:
            shapes.update({p + "mlp.gate_proj.bias": (i,), p + "mlp.up_proj.bias": (i,), p + "mlp.down_proj.bias": (h,)})
        if config.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)})
    return shapes


def check_tensor_table(weights: Weights, config: ModelConfig, root: Path) -> None:
    """Raise ModelDirError for the first missing, unexpected, mis-shaped or non-float tensor."""
    shapes = expected_shapes(config)
    for name, shape in shapes.items():
        if name not in weights:
            raise ModelDirError(root, f"missing tensor {name!r} (expected shape {list(shape)})")
        info = weights.info(name)
        if tuple(info.shape) != shape:
            raise ModelDirError(info.file, f"tensor {name!r} has shape {list(info.shape)}, expected {list(shape)}")
        if info.dtype not in FLOAT_DTYPES:
            raise UnsupportedError(info.file, f"tensor {name!r} has dtype {info.dtype}; "
                                              f"only F32/F16/BF16 weights are supported (no quantised formats)")
    tolerated = {"lm_head.weight"} if config.tie_word_embeddings else set()
    unexpected = [n for n in weights.names
                  if n not in shapes and n not in tolerated and not n.endswith(IGNORED_SUFFIXES)]
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise ModelDirError(weights.info(unexpected[0]).file,
                            f"unexpected tensor {unexpected[0]!r}{more} for {config.architecture}")


def load_model_weights(weights: Weights, config: ModelConfig, root: Path, device, dtype) -> ModelWeights:
    check_tensor_table(weights, config, root)

    def get(name: str) -> torch.Tensor:
        return weights.get(name).to(device=device, dtype=dtype)

    def maybe(name: str) -> torch.Tensor | None:
        return get(name) if name in weights else None

    def cat(*names: str) -> torch.Tensor | None:
        if names[0] not in weights:
            return None
        return torch.cat([get(n) for n in names], dim=0)

    layers = []
    for n in range(config.num_hidden_layers):
        p = f"model.layers.{n}."
        a, m = p + "self_attn.", p + "mlp."
        layers.append(LayerWeights(
            input_norm=get(p + "input_layernorm.weight"), post_norm=get(p + "post_attention_layernorm.weight"),
            qkv=cat(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
            qkv_bias=cat(a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"),
            q_norm=maybe(a + "q_norm.weight") if config.qk_norm else None,
            k_norm=maybe(a + "k_norm.weight") if config.qk_norm else None,
            o=get(a + "o_proj.weight"), o_bias=maybe(a + "o_proj.bias"),
            gate_up=cat(m + "gate_proj.weight", m + "up_proj.weight"),
            gate_up_bias=cat(m + "gate_proj.bias", m + "up_proj.bias"),
            down=get(m + "down_proj.weight"), down_bias=maybe(m + "down_proj.bias")))
        if config.qk_norm:
            last = layers[-1]
            last.qk_norm = torch.cat([last.q_norm.expand(config.num_attention_heads, -1),
                                      last.k_norm.expand(config.num_key_value_heads, -1)])
    embed = get("model.embed_tokens.weight").contiguous()
    lm_head = embed if config.tie_word_embeddings else get("lm_head.weight")
    return ModelWeights(embed=embed, layers=layers, norm=get("model.norm.weight"), lm_head=lm_head)
