"""The Llama-family decoder forward pass: embedding -> N x (RMSNorm, GQA attention, RMSNorm, SwiGLU) -> norm.

Plain functions over `ModelWeights`; tokens travel packed as [num_tokens, hidden] (all sequences of a step,
one after another), and only attention looks at the batch layout (see attention.py).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from reference_engine.core.attention import StepMetadata, paged_attention
from reference_engine.config import ModelConfig
from reference_engine.errors import UnsupportedError
from reference_engine.core.cache.kv_cache import PagedKVCache
from reference_engine.core.model_weights import LayerWeights, ModelWeights
from reference_engine.core.rope import RopeTable, apply_rope

# capture(layer, module, tensor [num_tokens, hidden]) -> replacement tensor or None
CaptureHook = Callable[[int, str, torch.Tensor], "torch.Tensor | None"]
# project(x [T, in], weight [out, in], bias [out] | None) -> [T, out]: F.linear, or linear.decode_linear
Projection = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
SUPPORTED_ACTIVATIONS = ("silu", "swish")


def check_supported(config: ModelConfig, path) -> None:
    act = config.raw.get("hidden_act", config.raw.get("hidden_activation", "silu"))
    if act not in SUPPORTED_ACTIVATIONS:
        raise UnsupportedError(path, f"hidden_act {act!r} is not supported (SwiGLU with silu only)")
    if config.num_attention_heads % config.num_key_value_heads:
        raise UnsupportedError(path, f"num_attention_heads ({config.num_attention_heads}) is not a multiple of "
                                     f"num_key_value_heads ({config.num_key_value_heads})")


def layer_windows(config: ModelConfig) -> list[int | None]:
    """Sliding-window size per layer (None = full attention), as transformers assigns them."""
    window, n = config.sliding_window, config.num_hidden_layers
    if not window:
        return [None] * n
    types = config.raw.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        return [window if t == "sliding_attention" else None for t in types]
    if config.architecture in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        first = config.raw.get("max_window_layers", 28)
        return [window if i >= first else None for i in range(n)]
    return [window] * n


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # statistics in float32 whatever the model dtype, the weight applied in the model dtype (as transformers)
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _emit(capture: CaptureHook | None, layer: int, module: str, x: torch.Tensor) -> torch.Tensor:
    if capture is None:
        return x
    replaced = capture(layer, module, x)
    return x if replaced is None else replaced


def attention_block(x: torch.Tensor, w: LayerWeights, config: ModelConfig, layer: int, cache: PagedKVCache,
                    meta: StepMetadata, cos: torch.Tensor, sin: torch.Tensor, window: int | None,
                    linear: Projection = F.linear) -> torch.Tensor:
    """x [num_tokens, hidden] (normed) -> attention output [num_tokens, hidden]."""
    heads, kv_heads, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    qkv = linear(x, w.qkv, w.qkv_bias)                         # [T, (heads + 2 kv_heads) * d]
    qk, v = qkv.split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
    qk, v = qk.view(-1, heads + kv_heads, d), v.view(-1, kv_heads, d)
    if w.qk_norm is not None:                                  # per-head RMSNorm of q and k (Qwen3)
        qk = rms_norm(qk, w.qk_norm, config.rms_norm_eps)
    qk = apply_rope(qk, cos, sin)                              # q and k heads rotated in one pass
    q, k = qk[:, :heads], qk[:, heads:]                        # [T, heads, d], [T, kv_heads, d]
    cache.write(layer, meta.slot_mapping, k, v)
    out = paged_attention(q, cache, layer, meta, window)      # [T, heads * d]
    return linear(out, w.o, w.o_bias)


def mlp_block(x: torch.Tensor, w: LayerWeights, linear: Projection = F.linear) -> torch.Tensor:
    gate, up = linear(x, w.gate_up, w.gate_up_bias).chunk(2, dim=-1)     # [T, intermediate] each
    return linear(F.silu(gate) * up, w.down, w.down_bias)


def decoder_layer(h: torch.Tensor, w: LayerWeights, config: ModelConfig, i: int, cache: PagedKVCache,
                  meta: StepMetadata, cos: torch.Tensor, sin: torch.Tensor, window: int | None,
                  capture: CaptureHook | None = None, linear: Projection = F.linear) -> torch.Tensor:
    """One decoder layer on the residual stream h [num_tokens, hidden] -> h; writes layer i's K/V.
    The resident forward below and a layer-by-layer (streaming) forward both run exactly this."""
    eps = config.rms_norm_eps
    x = _emit(capture, i, "input_norm", rms_norm(h, w.input_norm, eps))
    a = attention_block(x, w, config, i, cache, meta, cos, sin, window, linear)
    h = h + _emit(capture, i, "attn", a)
    x = _emit(capture, i, "post_norm", rms_norm(h, w.post_norm, eps))
    m = _emit(capture, i, "mlp", mlp_block(x, w, linear))
    return _emit(capture, i, "hidden", h + m)


def forward(weights: ModelWeights, config: ModelConfig, tokens: torch.Tensor, cache: PagedKVCache,
            meta: StepMetadata, rope: RopeTable, windows: list[int | None],
            capture: CaptureHook | None = None, linear: Projection = F.linear) -> torch.Tensor:
    """tokens [num_tokens] -> final-norm hidden states [num_tokens, hidden]; writes this step's K/V."""
    cos, sin = rope.lookup(meta.positions, check=False)        # [T, head_dim] each; Engine checked the range
    h = _emit(capture, -1, "embed", F.embedding(tokens, weights.embed))
    for i, w in enumerate(weights.layers):
        h = decoder_layer(h, w, config, i, cache, meta, cos, sin, windows[i], capture, linear)
    return _emit(capture, len(weights.layers), "final_norm", rms_norm(h, weights.norm, config.rms_norm_eps))
