"""What an engine family is: data plus a few small functions, no per-family branches in the forward pass.

A family (one module per family in this package) declares the architectures it runs and provides
- `settings(config) -> Settings`: its own config.json fields turned into the switches the shared forward reads
  (norm kind, sandwich norms, activation, attention scale/soft-capping/q-k norm, MoE routing, ...);
- `layer_plan(config, n) -> {LayerWeights field: Slot | [Slot, ...]}`: the Hugging Face tensor names and shapes
  of layer n by role. A Slot is a list of (name, shape) concatenated along dim 0 into one engine tensor (q/k/v
  -> qkv, gate/up -> gate_up); a list of Slots is stacked (one per expert). The loader, the shape check and
  the static checks all read this one plan;
- `windows(config) -> [window | None per layer]`: which layers use sliding-window attention;
- `mixers(config) -> [kind per layer]`: the token mixer each layer runs, a key of `model.MIXERS` ("attention"
  by default; "mla", "gated_delta_net", "mamba2", "short_conv" ... each a small module of its own in core/);
- `cache_layout(config) -> [KVLayout | StateLayout per layer]` (core/cache/layout.py): what each layer keeps
  between steps, per token in the paged pools or per sequence as a recurrent state. The engine sizes its
  cache, the memory plan and `probe kv` their bytes from it.
`model.decoder_layer` runs any family from its Settings; `model_weights` loads any family from its plan. Roles
a plan names that are not LayerWeights fields (a new mixer's own tensors) land in `LayerWeights.extra`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import LayerCache, dense_layout

Shape = tuple[int, ...]
# LayerWeights.extra roles of experts in transformers' fused, biased layout (gpt-oss; core/clamped_swiglu.py)
FUSED_GATE_UP, FUSED_GATE_UP_BIAS = "experts_gate_up_fused", "experts_gate_up_fused_bias"
FUSED_DOWN, FUSED_DOWN_BIAS = "experts_down_fused", "experts_down_fused_bias"
Slot = list[tuple[str, Shape]]
LayerPlan = dict[str, "Slot | list[Slot]"]
LAYER_KINDS = ("full_attention", "sliding_attention")   # per-layer-kind RoPE blocks (Gemma 3, OLMo 3)


@dataclass(frozen=True)
class MoESettings:
    num_experts: int
    top_k: int
    norm_topk_prob: bool                   # renormalise the top-k probabilities to sum to 1
    cast_weights: bool = True              # routing weights cast back to the model dtype (Mixtral keeps fp32)
    shared_expert: bool = False            # Qwen2-MoE: a dense expert for every token, scaled by sigmoid(gate)
    sparse_layers: frozenset = frozenset()  # layers with a MoE block (the others run a dense MLP)
    # the router's method (core/moe.py ROUTERS): "softmax_topk" (Mixtral, Qwen-MoE, OLMoE, DeepSeek-V2 greedy),
    # "group_limited_greedy" (DeepSeek-V2: softmax, groups ranked by their best expert), "noaux_tc" (DeepSeek-V3,
    # Kimi K2, GLM-4.5, MiniMax-M2 with one group: sigmoid scores, + e_score_correction_bias for the choice only,
    # groups ranked by their top-2), "sigmoid_topk" (Llama 4: top-k of the logits, sigmoid of the chosen ones),
    # "topk_softmax" (gpt-oss: top-k of the logits, softmax over those k only)
    method: str = "softmax_topk"
    n_group: int = 1                       # experts split into n_group equal groups ...
    topk_group: int = 1                    # ... of which each token may use the topk_group best
    routed_scaling: float = 1.0            # routed_scaling_factor: the routed experts' weights times this
    router_fp32: bool = False              # router logits computed in float32 (DeepSeek/GLM keep the gate fp32)
    scale_input: bool = False              # Llama 4: the routing weight multiplies the expert's input, not output
    swiglu_limit: float | None = None      # gpt-oss: experts run the clamped SwiGLU (core/clamped_swiglu.py)
    swiglu_alpha: float = 1.702            # its sigmoid gain


@dataclass(frozen=True)
class MLASettings:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the dims core/mla.py reads."""
    q_lora_rank: int | None                # None: a plain q_proj (DeepSeek-V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    interleaved: bool                      # rope pairs (x0, x1), (x2, x3) ... (V2 always; V3 `rope_interleave`)
    lora_eps: float = 1e-6                 # q_a/kv_a layernorms' eps (transformers builds them with the default)


@dataclass(frozen=True)
class MambaDims:
    """A Mamba2 mixer's sizes (core/recurrent/mamba2.py); dt is clamped to [dt_min, dt_max] (time_step_limit)."""
    heads: int
    head_dim: int
    groups: int
    d_state: int
    d_conv: int
    chunk: int
    dt_min: float = 0.0
    dt_max: float = float("inf")
    # the output's norm and gate: "gated" weight * RMSNorm(y * silu(z)) (Mamba2, Granite 4); "norm_gate"
    # weight * RMSNorm(y) * silu(z) and "gate" y * silu(z) without a norm (Falcon-H1: mamba_norm_before_gate,
    # mamba_rms_norm false); the RMSNorm's statistics per group
    norm: str = "gated"
    scales: tuple[float, ...] | None = None   # Falcon-H1 ssm_multipliers: in_proj's z, x, B, C, dt times these

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.inner + 2 * self.groups * self.d_state


@dataclass(frozen=True)
class ParallelScales:
    """A layer running attention and a Mamba2 mixer side by side on the same normed input (Falcon-H1): each
    branch's input and output multipliers (core/parallel_mixer.py); the two outputs are summed."""
    attn_in: float = 1.0
    attn_out: float = 1.0
    ssm_in: float = 1.0
    ssm_out: float = 1.0


@dataclass(frozen=True)
class AttentionSettings:
    """How a family's attention differs from plain scaled dot-product attention over its q, k, v."""
    scale: float | None = None             # None: head_dim ** -0.5 (Gemma: query_pre_attn_scalar ** -0.5)
    softcap: float | None = None           # Gemma 2: scores -> cap * tanh(scores / cap)
    qk_norm: str | None = None             # "head": per-head RMSNorm of q, k (Qwen3, Gemma 3); "full": over
                                           # the whole q and k projections (OLMoE)
    qk_l2_norm: bool = False               # Llama 4: weightless RMSNorm of every q, k head after rope (rope layers)
    clip_qkv: float | None = None          # OLMoE: q, k, v clamped to +-clip_qkv
    output_gate: bool = False              # Qwen3-Next: q_proj also gives each head a gate, the attention
                                           # output is multiplied by sigmoid(gate) before o_proj
    chunked_layers: frozenset = frozenset()  # Llama 4: layers whose tokens attend only inside their chunk
    chunk: int | None = None               # that chunk (attention_chunk_size): keys with pos // chunk == q's


@dataclass(frozen=True)
class PositionSettings:
    """Which layers get which rotary embedding (core/positions.py, core/rope.py)."""
    nope_layers: frozenset = frozenset()   # layers that get no rotary embedding at all (SmolLM3, Llama 4 NoPE)
    temperature: tuple[float, float] | None = None   # Llama 4 NoPE layers (attn_scale, floor_scale):
                                           # q *= 1 + attn_scale * log1p(floor((pos + 1) / floor_scale))
    interleaved: bool = False              # Llama 4: rope turns adjacent pairs (2i, 2i+1) (complex multiply)
    local_rope: bool = False               # Gemma 3, OLMo 3: sliding layers use their own RoPE table
    local_rope_plain: bool = False         # OLMo 3 with a flat rope_scaling: the sliding layers' table is plain
                                           # RoPE on rope_theta (the scaling is the full layers' only)


@dataclass(frozen=True)
class Scales:
    """Constant multipliers on the residual stream, the MLP and the logits; None: no multiplier."""
    embed: float | None = None             # Gemma: embeddings times sqrt(hidden_size); Granite, Falcon-H1
    residual: float | None = None          # Granite: each branch times residual_multiplier before the add
    mlp: tuple[float, float] | None = None   # Falcon-H1 mlp_multipliers: gate_proj's output times the first
                                           # before the activation, down_proj's output times the second
    logits_divisor: float | None = None    # Granite: logits / logits_scaling
    final_softcap: float | None = None     # Gemma 2: logits -> cap * tanh(logits / cap)


@dataclass(frozen=True)
class Settings:
    family: str
    norm: str = "rms"                      # "rms": w * norm(x); "rms_plus_one": norm(x) * (1 + w) in fp32 (Gemma);
                                           # "rms_f32": w * norm(x) in fp32, then cast (gpt-oss)
    sandwich: bool = False                 # Gemma 2/3: a norm after each branch too, before the residual add
    post_norms: bool = False               # OLMo 2/3: no norm before a branch; post_attention_layernorm and
                                           # post_feedforward_layernorm close each branch before the residual add
    final_norm: str = "model.norm.weight"  # the final norm's tensor (LFM2: model.embedding_norm.weight)
    activation: str = "silu"               # the gated MLP's activation ("silu", "gelu_tanh", "gelu")
    attention: AttentionSettings = field(default_factory=AttentionSettings)
    positions: PositionSettings = field(default_factory=PositionSettings)
    scales: Scales = field(default_factory=Scales)
    moe: MoESettings | None = None
    mla: MLASettings | None = None
    mamba: MambaDims | None = None         # the Mamba2 layers' sizes (core/recurrent/mamba2.py)
    parallel: ParallelScales | None = None  # Falcon-H1: attention beside Mamba2 in one layer, their multipliers


def default_windows(config: ModelConfig) -> list[int | None]:
    """`layer_types` when config.json lists them, else the window (if any) on every layer."""
    window, n = config.sliding_window, config.num_hidden_layers
    if not window:
        return [None] * n
    types = config.raw.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        return [window if t == "sliding_attention" else None for t in types]
    return [window] * n


def default_mixers(config: ModelConfig) -> list[str]:
    return ["attention"] * config.num_hidden_layers


def default_cache_layout(config: ModelConfig) -> list[LayerCache]:
    return dense_layout(config.num_hidden_layers, config.num_key_value_heads, config.head_dim)


@dataclass(frozen=True)
class Family:
    name: str
    architectures: tuple[str, ...]
    settings: Callable[[ModelConfig], Settings]
    layer_plan: Callable[[ModelConfig, int], LayerPlan]
    windows: Callable[[ModelConfig], list] = field(default=default_windows)
    mixers: Callable[[ModelConfig], list[str]] = field(default=default_mixers)
    cache_layout: Callable[[ModelConfig], list[LayerCache]] = field(default=default_cache_layout)


@dataclass(frozen=True)
class Bound:
    """A config's family, its parsed settings and its mixer kind per layer (cached on `config.family`)."""
    family: Family
    settings: Settings
    mixers: tuple[str, ...] = ()


def attention_plan(p: str, config: ModelConfig, *, q_bias: bool = False, o_bias: bool = False,
                   qk_norm: str | None = None) -> LayerPlan:
    """Separate q/k/v/o projections (Llama naming), fused into qkv; optional biases and q/k norms."""
    h, d = config.hidden_size, config.head_dim
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    a = p + "self_attn."
    plan: LayerPlan = {
        "qkv": [(a + "q_proj.weight", (q_out, h)), (a + "k_proj.weight", (kv_out, h)),
                (a + "v_proj.weight", (kv_out, h))],
        "o": [(a + "o_proj.weight", (h, q_out))]}
    if q_bias:
        plan["qkv_bias"] = [(a + "q_proj.bias", (q_out,)), (a + "k_proj.bias", (kv_out,)),
                            (a + "v_proj.bias", (kv_out,))]
    if o_bias:
        plan["o_bias"] = [(a + "o_proj.bias", (h,))]
    if qk_norm == "head":
        plan["q_norm"], plan["k_norm"] = [(a + "q_norm.weight", (d,))], [(a + "k_norm.weight", (d,))]
    elif qk_norm == "full":
        plan["q_norm"], plan["k_norm"] = [(a + "q_norm.weight", (q_out,))], [(a + "k_norm.weight", (kv_out,))]
    return plan


def norms_plan(p: str, config: ModelConfig, *, sandwich: bool = False) -> LayerPlan:
    h = config.hidden_size
    plan: LayerPlan = {"input_norm": [(p + "input_layernorm.weight", (h,))],
                       "post_norm": [(p + "post_attention_layernorm.weight", (h,))]}
    if sandwich:   # Gemma: post_attention_layernorm closes the attention branch, pre_feedforward opens the MLP
        plan["pre_ff_norm"] = [(p + "pre_feedforward_layernorm.weight", (h,))]
        plan["post_ff_norm"] = [(p + "post_feedforward_layernorm.weight", (h,))]
    return plan


def mlp_plan(prefix: str, hidden: int, inter: int, *, bias: bool = False) -> LayerPlan:
    """gate/up/down projections under `prefix` ("model.layers.3.mlp."), gate and up fused."""
    plan: LayerPlan = {"gate_up": [(prefix + "gate_proj.weight", (inter, hidden)),
                                   (prefix + "up_proj.weight", (inter, hidden))],
                       "down": [(prefix + "down_proj.weight", (hidden, inter))]}
    if bias:
        plan["gate_up_bias"] = [(prefix + "gate_proj.bias", (inter,)), (prefix + "up_proj.bias", (inter,))]
        plan["down_bias"] = [(prefix + "down_proj.bias", (hidden,))]
    return plan


def raw_int(config: ModelConfig, key: str, default: int | None = None) -> int:
    from reference_engine.errors import ModelDirError
    value = config.raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelDirError("config.json", f"'{key}' must be a non-negative integer, found {value!r}")
    return value


def raw_float(config: ModelConfig, key: str, default: float | None = None) -> float | None:
    from reference_engine.errors import ModelDirError
    value = config.raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelDirError("config.json", f"'{key}' must be a number or null, found {value!r}")
    return float(value)


def raw_int_list(config: ModelConfig, key: str, allowed: tuple[int, ...] | None = None) -> list[int] | None:
    """A config.json list of integers (None when absent or null); anything else is a ModelDirError naming it."""
    from reference_engine.errors import ModelDirError
    value = config.raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise ModelDirError("config.json", f"'{key}' must be a list of integers, found {str(value)[:60]}")
    if allowed is not None and any(v not in allowed for v in value):
        raise ModelDirError("config.json", f"'{key}' entries must be one of {list(allowed)}, found "
                                           f"{sorted(set(value) - set(allowed))}")
    return value


def nope_layers(config: ModelConfig) -> frozenset:
    """Layers without RoPE from `no_rope_layers` (SmolLM3, Llama 4: 1 = RoPE, 0 = NoPE, read per layer index as
    transformers does), else one NoPE layer every `no_rope_layer_interval` (default 4) as their configs derive it."""
    from reference_engine.errors import ModelDirError
    n = config.num_hidden_layers
    flags = raw_int_list(config, "no_rope_layers", allowed=(0, 1))
    if not flags:
        interval = raw_int(config, "no_rope_layer_interval", 4)
        if interval < 1:
            raise ModelDirError("config.json", "'no_rope_layer_interval' must be at least 1")
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    if len(flags) < n:
        raise ModelDirError("config.json", f"'no_rope_layers' has {len(flags)} entries for {n} layers")
    return frozenset(i for i in range(n) if not flags[i])
