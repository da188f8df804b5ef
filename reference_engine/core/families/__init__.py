"""Engine families: which architectures the core runs, and how (see base.py for what a family provides).

`bind(config)` resolves a config's family once and caches it, with its parsed settings, on `config.family`;
`settings(config)`, `layer_plan(config, n)`, `windows(config)`, `mixers(config)` and `cache_layout(config)` are
what the loader, the forward and the cache use.
"""
from __future__ import annotations

from importlib import import_module

from reference_engine.architectures import REGISTRY
from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import (LayerCache, bytes_per_token, dense_layout,
                                                 state_bytes_per_sequence)
from reference_engine.core.families.base import Bound, Family, LayerPlan, MLASettings, MoESettings, Settings
from reference_engine.errors import ModelDirError, UnsupportedError

# each registered family's engine module: core/families/<kind>/<module>.py beside architectures/<kind>/<module>.py
# (the one registry is architectures.REGISTRY)
FAMILIES: tuple[Family, ...] = tuple(import_module(f"{__name__}.{path}").FAMILY for path in REGISTRY)
BY_ARCHITECTURE = {arch: fam for fam in FAMILIES for arch in fam.architectures}
SUPPORTED_ARCHITECTURES = tuple(BY_ARCHITECTURE)


def is_supported(architecture: str) -> bool:
    return architecture in BY_ARCHITECTURE


def bind(config: ModelConfig, path="config.json") -> Bound:
    """The config's family and settings; UnsupportedError for an architecture no family runs."""
    if config.family is None:
        fam = BY_ARCHITECTURE.get(config.architecture)
        if fam is None:
            raise UnsupportedError(path, f"unsupported architecture {config.architecture!r} "
                                         f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
        config.family = Bound(fam, fam.settings(config), tuple(fam.mixers(config)))
    return config.family


def settings(config: ModelConfig) -> Settings:
    return bind(config).settings


def layer_plan(config: ModelConfig, n: int) -> LayerPlan:
    return bind(config).family.layer_plan(config, n)


def windows(config: ModelConfig) -> list[int | None]:
    return bind(config).family.windows(config)


def mixers(config: ModelConfig) -> tuple[str, ...]:
    return bind(config).mixers


def cache_layout(config: ModelConfig) -> list[LayerCache]:
    return bind(config).family.cache_layout(config)


def kv_bytes_per_token(config: ModelConfig, dtype, layers: range | None = None) -> int:
    """Bytes the paged pools hold per token (all layers, or `layers`) in `dtype`: the family's cache layout, the
    one source for the engine, the memory plan, `probe kv` and the roofline; an architecture no family runs
    (probe kv reads any decoder) counts dense K and V."""
    try:
        layout = cache_layout(config)
    except (UnsupportedError, ModelDirError):      # a config no family runs (or runs as given): dense K and V
        layout = dense_layout(config.num_hidden_layers, config.num_key_value_heads, config.head_dim)
    return bytes_per_token(layout if layers is None else layout[layers.start:layers.stop], dtype)


def state_bytes(config: ModelConfig, layers: range | None = None) -> int:
    """Bytes of recurrent state one sequence holds (all layers, or `layers`), constant in its length (float32
    states; 0 for an attention-only model or an architecture no family runs)."""
    try:
        layout = cache_layout(config)
    except (UnsupportedError, ModelDirError):
        return 0
    return state_bytes_per_sequence(layout if layers is None else layout[layers.start:layers.stop])


# the plan roles model.norm applies the family's RMSNorm to (besides the final norm)
NORM_ROLES = ("input_norm", "post_norm", "pre_ff_norm", "post_ff_norm", "q_norm", "k_norm")


def offset_norms(config: ModelConfig) -> frozenset[str]:
    """The tensors the family's RMSNorm reads as offsets from 1, `(1 + w) * norm(x)` (Gemma, Qwen3-Next): zeros
    there are a gain of one (what transformers initialises them to). Empty for other families and for an
    architecture no family runs."""
    try:
        if settings(config).norm != "rms_plus_one":
            return frozenset()
        names = {settings(config).final_norm}
        for n in range(config.num_hidden_layers):
            plan = layer_plan(config, n)
            names.update(name for role in NORM_ROLES for name, _ in plan.get(role, ()))
    except (UnsupportedError, ModelDirError):
        return frozenset()
    return frozenset(names)


__all__ = ["FAMILIES", "SUPPORTED_ARCHITECTURES", "Bound", "Family", "LayerPlan", "MLASettings", "MoESettings",
           "Settings", "bind", "cache_layout", "is_supported", "kv_bytes_per_token", "layer_plan", "mixers",
           "offset_norms", "settings", "state_bytes", "windows"]

