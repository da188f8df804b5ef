"""The decoder's tensors, loaded from safetensors by Hugging Face name, checked and cast once.

Every tensor the architecture needs must be present with exactly the expected shape; a missing,
unexpected or mis-shaped tensor is a one-line ModelDirError naming it. Q/K/V and gate/up projections are
concatenated once at load time so that a layer runs two matmuls fewer per step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from reference_engine.config import ModelConfig
from reference_engine.core import families
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.weights import Weights
from reference_engine.limits import check_layers_present

FLOAT_DTYPES = {"F32", "F16", "BF16", "F64"}
# stored by some older checkpoints, recomputed by every implementation
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass
class LayerWeights:
    """One decoder layer's tensors by role (families/base.py: each family's plan names the files' tensors).
    A recurrent layer has no qkv/o; a mixer's own tensors (MLA's latent projections, a DeltaNet's conv and decay,
    attention sinks ...) sit in `extra` by role, documented with their shapes in the mixer's module."""
    input_norm: torch.Tensor | None = None  # [hidden]; None for post-norm families (OLMo 2/3)
    post_norm: torch.Tensor | None = None   # [hidden] (Gemma: the norm closing the attention branch)
    qkv: torch.Tensor | None = None   # [(heads + 2 * kv_heads) * head_dim, hidden]
    qkv_bias: torch.Tensor | None = None    # [(heads + 2 * kv_heads) * head_dim]
    q_norm: torch.Tensor | None = None      # [head_dim] (Qwen3, Gemma 3) or [heads * head_dim] (OLMoE)
    k_norm: torch.Tensor | None = None      # [head_dim] or [kv_heads * head_dim]
    o: torch.Tensor | None = None     # [hidden, heads * head_dim]
    o_bias: torch.Tensor | None = None
    gate_up: torch.Tensor | None = None     # [2 * intermediate, hidden]; None in a MoE layer
    gate_up_bias: torch.Tensor | None = None
    down: torch.Tensor | None = None        # [hidden, intermediate]
    down_bias: torch.Tensor | None = None
    qk_norm: torch.Tensor | None = None   # [heads + kv_heads, head_dim]: q_norm and k_norm per head, one op for both
    pre_ff_norm: torch.Tensor | None = None    # [hidden] Gemma: opens the MLP branch
    post_ff_norm: torch.Tensor | None = None   # [hidden] Gemma: closes the MLP branch
    router: torch.Tensor | None = None         # [experts, hidden] MoE router
    experts_gate_up: torch.Tensor | None = None   # [experts, 2 * expert_intermediate, hidden]
    experts_down: torch.Tensor | None = None      # [experts, hidden, expert_intermediate]
    shared_gate_up: torch.Tensor | None = None    # [2 * shared_intermediate, hidden] Qwen2-MoE shared expert
    shared_down: torch.Tensor | None = None       # [hidden, shared_intermediate]
    shared_gate: torch.Tensor | None = None       # [1, hidden] its sigmoid gate
    extra: dict[str, torch.Tensor] = field(default_factory=dict)   # a mixer's or family's own roles


    @property
    def dtype(self) -> torch.dtype:
        """The layer's weight dtype (every tensor of a loaded layer has it)."""
        return next(t for t in (self.input_norm, self.post_norm, self.qkv) if t is not None).dtype


LAYER_FIELDS = frozenset(LayerWeights.__dataclass_fields__) - {"extra"}


@dataclass
class ModelWeights:
    embed: torch.Tensor               # [vocab, hidden]
    layers: list[LayerWeights]
    norm: torch.Tensor                # [hidden]
    lm_head: torch.Tensor             # [vocab, hidden]; the embedding itself when tied


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """name -> shape of every tensor the config's family needs (its layer plans plus embedding/norm/head)."""
    h = config.hidden_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, h),
                                          families.settings(config).final_norm: (h,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for n in range(config.num_hidden_layers):
        for slot in families.layer_plan(config, n).values():
            for name, shape in _flat(slot):
                shapes[name] = shape
    return shapes


def _flat(slot) -> list[tuple[str, tuple[int, ...]]]:
    """A plan entry's (name, shape) pairs: a Slot, or a list of Slots (stacked experts)."""
    return [pair for part in slot for pair in (part if isinstance(part, list) else [part])]


def mtp_tensors(config: ModelConfig, names) -> set[str]:
    """The multi-token-prediction layers DeepSeek-V3, Kimi K2 and GLM-4.5 checkpoints store after the decoder
    (`num_nextn_predict_layers` of them: model.layers.L, L+1, ...): not part of next-token decoding, skipped by
    transformers (_keys_to_ignore_on_load_unexpected) and by us."""
    extra = config.raw.get("num_nextn_predict_layers") or 0
    if isinstance(extra, bool) or not isinstance(extra, int) or extra < 1:
        return set()
    first = config.num_hidden_layers
    prefixes = tuple(f"model.layers.{i}." for i in range(first, first + extra))
    return {n for n in names if n.startswith(prefixes)}


def check_tensor_table(weights: Weights, config: ModelConfig, root: Path) -> None:
    """Raise ModelDirError for the first missing, unexpected, mis-shaped or non-float tensor."""
    check_layers_present(config.num_hidden_layers, weights.names, root)   # before a table is sized from it
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
    tolerated |= getattr(weights, "droppable", frozenset())   # quantized modules' biases (files/quant/table.py)
    tolerated |= mtp_tensors(config, weights.names)
    unexpected = [n for n in weights.names
                  if n not in shapes and n not in tolerated and not n.endswith(IGNORED_SUFFIXES)]
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise ModelDirError(weights.info(unexpected[0]).file,
                            f"unexpected tensor {unexpected[0]!r}{more} for {config.architecture}")


def load_model_weights(weights: Weights, config: ModelConfig, root: Path, device, dtype,
                       reader=None) -> ModelWeights:
    """Every tensor checked against the config's table, then read (through `reader` when given: a
    layer_reader.ChunkedWeights over the same files, which leaves no page cache behind) and cast/fused."""
    check_tensor_table(weights, config, root)
    weights = reader or weights
    get = tensor_getter(weights, device, dtype)
    layers = [load_layer_weights(weights, config, n, device, dtype) for n in range(config.num_hidden_layers)]
    embed = get("model.embed_tokens.weight").contiguous()
    lm_head = embed if config.tie_word_embeddings else get("lm_head.weight")
    return ModelWeights(embed=embed, layers=layers, norm=get(families.settings(config).final_norm), lm_head=lm_head)


def tensor_getter(weights: Weights, device, dtype):
    def get(name: str) -> torch.Tensor:
        return weights.get(name).to(device=device, dtype=dtype)
    return get


def fill(buffers: dict, role: str, slot, weights: Weights, device, dtype) -> torch.Tensor:
    """The slot's tensors cast into buffers[role], stacked along rows (what torch.cat of the cast parts gives:
    the fused Q/K/V and gate/up), the buffer allocated only when this role's shape or dtype changed. A slot of
    one Slot per expert fills [experts, rows, ...] (what torch.stack of each expert's cat gives), each part
    copied once: no per-expert tensor and no stacked copy beside the buffer."""
    per_expert = isinstance(slot[0], list)
    experts = slot if per_expert else [slot]
    shape = (sum(s[0] for _, s in experts[0]), *experts[0][0][1][1:])
    shape = (len(experts), *shape) if per_expert else shape
    out, device = buffers.get(role), torch.device(device)
    same_device = out is not None and out.device.type == device.type and device.index in (None, out.device.index)
    if not same_device or tuple(out.shape) != shape or out.dtype != dtype:     # ("cuda" holds on cuda:0)
        buffers[role] = out = None                           # drop the old one before allocating its successor
        out = buffers[role] = torch.empty(shape, dtype=dtype, device=device)
    for e, parts in enumerate(experts):
        rows, at = out[e] if per_expert else out, 0
        for name, part_shape in parts:
            part = weights.get(name)
            if tuple(part.shape) != tuple(part_shape):       # check_tensor_table's shapes: never, but not silently
                raise ValueError(f"tensor {name!r} has shape {list(part.shape)}, expected {list(part_shape)}")
            rows[at:at + part.shape[0]].copy_(part)
            at += part.shape[0]
    return out


def layer_tensor_names(config: ModelConfig, n: int) -> list[str]:
    """The file tensors of decoder layer n, in the order load_layer_weights reads them."""
    def names(slot) -> list[str]:
        if isinstance(slot[0], list):                        # one Slot per expert
            return [name for part in slot for name in names(part)]
        return [name for name, _ in slot]
    return [name for slot in families.layer_plan(config, n).values() for name in names(slot)]


def load_layer_weights(weights: Weights, config: ModelConfig, n: int, device, dtype,
                       into: dict | None = None) -> LayerWeights:
    """Decoder layer n's tensors, cast and fused. The resident loader calls it for every layer once; the
    streaming core (streaming.py) calls it just in time for one layer, so both run the same weights. into:
    the previous layer's buffers (role -> tensor), overwritten when the shapes match (the streaming core, whose
    layers come and go: fresh allocations would page-fault a layer's bytes in again every time)."""
    get = tensor_getter(weights, device, dtype)

    def load(slot, role: str) -> torch.Tensor:
        if into is not None:
            return fill(into, role, slot, weights, device, dtype)
        if isinstance(slot[0], list):                        # one Slot per expert -> [experts, ...], written once
            return fill({}, role, slot, weights, device, dtype)
        parts = [get(name) for name, _ in slot]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)

    loaded = {role: load(slot, role) for role, slot in families.layer_plan(config, n).items()}
    layer = LayerWeights(**{r: t for r, t in loaded.items() if r in LAYER_FIELDS},
                         extra={r: t for r, t in loaded.items() if r not in LAYER_FIELDS})
    if families.settings(config).attention.qk_norm == "head" and layer.q_norm is not None:
        layer.qk_norm = torch.cat([layer.q_norm.expand(config.num_attention_heads, -1),
                                   layer.k_norm.expand(config.num_key_value_heads, -1)])
    return layer
