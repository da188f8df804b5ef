"""The decoder forward pass: embedding -> N x (norm, GQA attention, norm, gated MLP or experts) -> norm.

One code path for every family: what differs (norm kind, Gemma's sandwich norms and soft-capping, q/k norms,
MoE routing, ...) is data in the family's Settings (core/families), never a branch on the architecture name.
Which token mixer a layer runs is data too: the family lists a kind per layer (`families.mixers`), and
`MIXERS` maps each kind to its block function (GQA attention here; MLA, linear attention, state-space and
convolution mixers each in a small module of their own).

Plain functions over `ModelWeights`; tokens travel packed as [num_tokens, hidden] (all sequences of a step,
one after another), and only attention looks at the batch layout (see attention.py).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from reference_engine.core import families
from reference_engine.core.attention import StepMetadata, paged_attention
from reference_engine.config import ModelConfig
from reference_engine.errors import UnsupportedError
from reference_engine.core.cache.kv_cache import PagedKVCache
from reference_engine.core.layers.norms import NORMS
from reference_engine.core.layers.step import LayerStep
from reference_engine.core.recurrent.gated_delta_net import gated_delta_net_block
from reference_engine.core.mla import mla_block
from reference_engine.core.model_weights import LayerWeights, ModelWeights
from reference_engine.core.moe import moe_mlp
from reference_engine.core.parallel_mixer import parallel_block
from reference_engine.core import positions
from reference_engine.core.rope import RopeTable
from reference_engine.core.recurrent.mamba2 import mamba2_block
from reference_engine.core.recurrent.short_conv import short_conv_block

# capture(layer, module, tensor [num_tokens, hidden]) -> replacement tensor or None
CaptureHook = Callable[[int, str, torch.Tensor], "torch.Tensor | None"]
# project(x [T, in], weight [out, in], bias [out] | None) -> [T, out]: F.linear, or linear.decode_linear
Projection = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]
ACTIVATIONS = {"silu": F.silu, "swish": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
               "gelu": F.gelu}


def check_supported(config: ModelConfig, path) -> None:
    """UnsupportedError unless a family runs this architecture with these settings (families/)."""
    settings = families.bind(config, path).settings
    act = config.raw.get("hidden_act", "silu") if settings.activation == "silu" else settings.activation
    if act not in ACTIVATIONS:
        raise UnsupportedError(path, f"hidden_act {act!r} is not supported (SwiGLU with silu only)")
    unknown = sorted(set(families.mixers(config)) - set(MIXERS))
    if unknown:
        raise UnsupportedError(path, f"layer kind {unknown[0]!r} is not implemented by the engine")
    if config.num_attention_heads % config.num_key_value_heads:
        raise UnsupportedError(path, f"num_attention_heads ({config.num_attention_heads}) is not a multiple of "
                                     f"num_key_value_heads ({config.num_key_value_heads})")


def layer_windows(config: ModelConfig) -> list[int | None]:
    """Sliding-window size per layer (None = full attention), as transformers assigns them."""
    return families.windows(config)


def norm(x: torch.Tensor, weight: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """The family's RMSNorm of x [..., dim] with weight [dim]."""
    return NORMS[families.settings(config).norm](x, weight, config.rms_norm_eps)


def embed(tokens: torch.Tensor, table: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """tokens [T] -> [T, hidden]: the embedding rows, times sqrt(hidden) for Gemma (in the table's dtype)."""
    h = F.embedding(tokens, table)
    scale = families.settings(config).scales.embed
    return h if scale is None else h * torch.tensor(scale, dtype=torch.float32).to(table.dtype)


def final_logits(logits: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """The LM head's output after the family's final scaling (Granite: / logits_scaling) and soft-capping
    (Gemma 2: cap * tanh(logits / cap))."""
    s = families.settings(config).scales
    if s.logits_divisor is not None:                           # Granite: logits / logits_scaling
        logits = logits / s.logits_divisor
    cap = s.final_softcap
    return logits if cap is None else torch.tanh(logits / cap) * cap


def emit_capture(capture: CaptureHook | None, layer: int, module: str, x: torch.Tensor) -> torch.Tensor:
    if capture is None:
        return x
    replaced = capture(layer, module, x)
    return x if replaced is None else replaced


def attention_block(x: torch.Tensor, w: LayerWeights, config: ModelConfig, step: LayerStep) -> torch.Tensor:
    """x [num_tokens, hidden] (normed) -> attention output [num_tokens, hidden]."""
    s, layer, meta, window, linear = families.settings(config), step.layer, step.meta, step.window, step.linear
    a = s.attention
    cos, sin, cache = step.cos, step.sin, step.cache
    heads, kv_heads, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    qkv = linear(x, w.qkv, w.qkv_bias)                         # [T, (heads + 2 kv_heads) * d]
    gate = None
    if a.output_gate:                                          # Qwen3-Next: per head, the query then its gate
        q_gate, kv = qkv.split([2 * heads * d, 2 * kv_heads * d], dim=-1)
        q, gate = q_gate.view(-1, heads, 2 * d).chunk(2, dim=-1)       # [T, heads, d] each
        qkv, gate = torch.cat([q.reshape(-1, heads * d), kv], dim=-1), gate.reshape(-1, heads * d)
    if a.qk_norm == "full" or a.clip_qkv is not None:          # OLMoE: norms over the whole q and k
        q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
        if a.qk_norm == "full":
            q, k = norm(q, w.q_norm, config), norm(k, w.k_norm, config)
        if a.clip_qkv is not None:
            q, k, v = (t.clamp(-a.clip_qkv, a.clip_qkv) for t in (q, k, v))
        qkv = torch.cat([q, k, v], dim=-1)
    qk, v = qkv.split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
    qk, v = qk.view(-1, heads + kv_heads, d), v.view(-1, kv_heads, d)
    if w.qk_norm is not None:                                  # per-head norm of q and k (Qwen3, Gemma 3)
        qk = norm(qk, w.qk_norm, config)
    if cos.dim() == 3:                                         # [2, T, rot]: global and local tables (Gemma 3)
        cos, sin = (cos[1], sin[1]) if window is not None else (cos[0], sin[0])
    qk = positions.place(qk, heads, layer, s, cos, sin, meta.positions, config.rms_norm_eps)
    q, k = qk[:, :heads], qk[:, heads:]                        # [T, heads, d], [T, kv_heads, d]
    cache.write(layer, meta.slot_mapping, k, v)
    chunk = a.chunk if layer in a.chunked_layers else None
    out = paged_attention(q, cache, layer, meta, window, a.scale, a.softcap, chunk,
                          w.extra.get("sinks"))                # [T, heads * d]
    if gate is not None:
        out = out * torch.sigmoid(gate)
    return linear(out, w.o, w.o_bias)


def mlp_block(x: torch.Tensor, w: LayerWeights, linear: Projection = F.linear,
              act: Callable = F.silu, scales: tuple[float, float] | None = None) -> torch.Tensor:
    gate, up = linear(x, w.gate_up, w.gate_up_bias).chunk(2, dim=-1)     # [T, intermediate] each
    if scales is None:
        return linear(act(gate) * up, w.down, w.down_bias)
    return linear(act(gate * scales[0]) * up, w.down, w.down_bias) * scales[1]   # Falcon-H1 mlp_multipliers


def feed_forward(x: torch.Tensor, w: LayerWeights, config: ModelConfig, i: int, capture: CaptureHook | None,
                 linear: Projection) -> torch.Tensor:
    """The dense gated MLP, or the mixture of experts in a MoE layer (router logits emitted as "router")."""
    s = families.settings(config)
    act = ACTIVATIONS[config.raw.get("hidden_act", "silu") if s.activation == "silu" else s.activation]
    if w.router is None:
        return mlp_block(x, w, linear, act, s.scales.mlp)
    return moe_mlp(x, w, s.moe, act, linear, lambda r: emit_capture(capture, i, "router", r))


# kind -> mixer(x [T, hidden] normed, w, config, step: LayerStep) -> [T, hidden]
MIXERS: dict[str, Callable] = {"attention": attention_block, "mla": mla_block,
                               "gated_delta_net": gated_delta_net_block, "short_conv": short_conv_block,
                               "mamba2": mamba2_block,
                               "attention_mamba2": partial(parallel_block, attention=attention_block, ssm=mamba2_block)}


def decoder_layer(h: torch.Tensor, w: LayerWeights, config: ModelConfig, i: int, cache: PagedKVCache,
                  meta: StepMetadata, cos: torch.Tensor, sin: torch.Tensor, window: int | None,
                  capture: CaptureHook | None = None, linear: Projection = F.linear) -> torch.Tensor:
    """One decoder layer on the residual stream h [num_tokens, hidden] -> h; writes layer i's K/V.
    The resident forward below and a layer-by-layer (streaming) forward both run exactly this.
    Capture points: "attn" and "mlp" are the branches as added to the residual (after Gemma's closing norms),
    "post_norm" is the MLP's input (Gemma: pre_feedforward_layernorm's output)."""
    post_only = families.settings(config).post_norms           # OLMo 2/3: the branches see h itself
    x = emit_capture(capture, i, "input_norm", h if post_only else norm(h, w.input_norm, config))
    a = MIXERS[families.mixers(config)[i]](x, w, config, LayerStep(i, cache, meta, cos, sin, window, linear))
    if w.pre_ff_norm is not None or post_only:                 # Gemma sandwich, OLMo: norm the branch, then add
        a = norm(a, w.post_norm, config)
    scale = families.settings(config).scales.residual          # Granite: residual_multiplier on each branch
    if scale is not None:
        a = a * scale
    h = h + emit_capture(capture, i, "attn", a)
    ff_norm = w.pre_ff_norm if w.pre_ff_norm is not None else w.post_norm
    x = emit_capture(capture, i, "post_norm", h if post_only else norm(h, ff_norm, config))
    m = feed_forward(x, w, config, i, capture, linear)
    if w.post_ff_norm is not None:
        m = norm(m, w.post_ff_norm, config)
    if scale is not None:
        m = m * scale
    m = emit_capture(capture, i, "mlp", m)
    return emit_capture(capture, i, "hidden", h + m)


def forward(weights: ModelWeights, config: ModelConfig, tokens: torch.Tensor, cache: PagedKVCache,
            meta: StepMetadata, rope: RopeTable, windows: list[int | None],
            capture: CaptureHook | None = None, linear: Projection = F.linear) -> torch.Tensor:
    """tokens [num_tokens] -> final-norm hidden states [num_tokens, hidden]; writes this step's K/V."""
    cos, sin = rope.lookup(meta.positions, check=False, ends=meta.ends)   # [T, rot] each ([2, T, rot]: local too)
    h = emit_capture(capture, -1, "embed", embed(tokens, weights.embed, config))
    for i, w in enumerate(weights.layers):
        h = decoder_layer(h, w, config, i, cache, meta, cos, sin, windows[i], capture, linear)
    return emit_capture(capture, len(weights.layers), "final_norm", norm(h, weights.norm, config))
