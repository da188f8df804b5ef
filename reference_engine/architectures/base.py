"""What one model family is, as data: the config.json names it answers to, the fields its config class fills in,
how it reads its rotary head, how llama.cpp's converter writes it to GGUF, and the family tables the static
checks read. One `ArchitectureData` per family module in this package; `architectures/__init__.py` lists them.

Imports nothing of the engine above errors/limits: the config reader (config.py), the GGUF reader (files/) and
the engine's families (core/families/) all read these modules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class GGUFArch:
    """What differs between architectures in a GGUF file (files/gguf_arch.py reads it)."""
    architecture: str                 # Hugging Face architectures[0]
    model_type: str
    permute_qk: bool = False          # convert_hf_to_gguf permutes q/k rows for llama.cpp's rotary layout
    layer_names: dict = field(default_factory=dict)   # overrides of gguf_arch.LAYER_NAMES
    norm_offset: float = 0.0          # GGUF norm weight = HF weight + norm_offset (Gemma's (1 + w) RMSNorm)
    config_extra: dict = field(default_factory=dict)  # fixed config.json fields
    derive: Callable[[dict], dict] | None = None      # config.json fields computed from the mapped ones
    tensor_names: dict = field(default_factory=dict)  # whole names inside blk.N (suffix included) -> HF names
    config_keys: dict = field(default_factory=dict)   # {arch}.<key> -> config.json field, this architecture's
    # a tensor the converter reshaped or reordered: touches(hf name), finish(hf name, tensor, meta) -> HF
    # layout (meta(key) reads {arch}.<key>), hf_shape(hf name, stored shape) -> HF shape
    touches: Callable[[str], bool] | None = None
    finish: Callable | None = None
    hf_shape: Callable | None = None
    global_names: dict = field(default_factory=dict)  # overrides of gguf_arch.GLOBAL_NAMES
    per_layer: Callable[[str, list], dict] | None = None   # a per-layer list value (head_count_kv) -> fields
    experts: dict = field(default_factory=dict)       # stacked [experts, ...] stem -> per-expert name with {e}
    # Hugging Face tensor inside the layer -> llama.cpp stems whose [.., rows, cols] tensors, each transposed to
    # [.., cols, rows], are concatenated along the last dim (Llama 4's fused [experts, hidden, 2 * inter]); or a
    # tuple of such tuples, alternatives: the one whose stems the layer holds (Granite's shared MLP is
    # ffn_gate_shexp / ffn_up_shexp beside experts, ffn_gate / ffn_up without)
    transposed: dict = field(default_factory=dict)
    # Hugging Face tensor inside the layer -> whole llama.cpp names inside blk.N whose parts (a ".weight" part
    # [.., rows, cols] transposed to [.., cols, rows] first, a ".bias" as stored) are interleaved along the last
    # dim: column j of part i lands at j * len(parts) + i (gpt-oss's fused gate_up: gate even, up odd)
    interleaved: dict = field(default_factory=dict)
    # another rule for those parts: join(hf name, parts, meta) -> tensor, join_shape(hf name, part shapes) -> HF
    # shape or None when they disagree (DeepSeek's kv_b from k_b and v_b, Qwen3-Next's in_proj_qkvz)
    join: Callable | None = None
    join_shape: Callable | None = None
    tensor_fields: Callable[[dict], dict] | None = None   # config.json fields told by the tensors present
    partial_rotary: bool = False      # rope.dimension_count below the head dim by design (GGF010 lets it be)
    # folds(source config.json, hf name) -> what the converter multiplied that tensor by (Falcon-H1's muP
    # multipliers), None when unchanged: `llmdoctor diff` compares the source tensor times it
    folds: Callable[[dict, str], object] | None = None


@dataclass(frozen=True)
class ArchitectureData:
    """One family's facts outside its torch code."""
    name: str                                   # the engine family's name (core/families)
    architectures: tuple[str, ...]              # the Hugging Face classes it runs, in the order errors list them
    # model_type -> architecture, for configs that omit "architectures" (the first type of an architecture is
    # the one config.model_type_of gives back)
    model_types: dict = field(default_factory=dict)
    # model_type -> the fields its config class fills in when config.json omits them: what transformers runs with
    class_defaults: dict = field(default_factory=dict)
    # model_type -> {canonical field: the name the config class reads instead} (its value wins over the canonical)
    own_fields: dict = field(default_factory=dict)
    rope_theta: dict = field(default_factory=dict)      # model_type -> the class's RoPE base when none is named
    # architecture -> the rotary head width when config.json names none (MLA: the rope key's, qk_rope_head_dim)
    rope_head_dim: dict = field(default_factory=dict)
    gguf: dict = field(default_factory=dict)             # llama.cpp general.architecture -> GGUFArch
    recurrent: str | None = None   # the recurrent mixer beside attention in a hybrid ("short_conv", "mamba2", ...)
    nope_layers: bool = False      # reads `no_rope_layers` (layers without RoPE)
    layer_kinds: dict = field(default_factory=dict)     # architecture -> the two layer_types it may list
    biased: tuple[str, ...] = ()   # architectures whose q/k/v projections always carry a bias (Qwen2)
    qk_normed: tuple[str, ...] = ()   # architectures with a per-head RMSNorm on q and k before RoPE (Qwen3)


def layer_kinds_from_kv(recurrent: str, attention: str) -> Callable[[str, list], dict]:
    """A hybrid's per-layer head_count_kv: 0 on its recurrent layers (convert_hf_to_gguf's LFM2Model,
    GraniteHybridModel), so it says layer_types, in the architecture's own spelling."""
    def per_layer(key: str, values: list) -> dict:
        if key != "attention.head_count_kv":
            return {}
        return {"num_key_value_heads": max(values) or 1,
                "layer_types": [recurrent if v == 0 else attention for v in values]}
    return per_layer
