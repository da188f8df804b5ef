"""One module per model family holding its facts outside the torch code (base.ArchitectureData): the config.json
names it answers to, its config class's defaults, its rotary head rule, its GGUF names, keys and folds, and the
family tables the static checks read. The config reader (config.py), the GGUF reader (files/gguf_arch.py), the
engine's families (core/families/) and the checks read the tables below, each derived once from `FAMILIES`.

Adding a family is one data module in the sub-package of its kind and one line in REGISTRY (docs/families.md);
the engine finds its own module for the family by the same path under core/families/.
"""
from __future__ import annotations

from importlib import import_module

from reference_engine.architectures.base import ArchitectureData, GGUFArch

# every family, once: "<kind>.<module>" of its data module here and of its engine module under core/families/, in
# the order errors list the architectures
REGISTRY: tuple[str, ...] = (
    "dense.llama",
    "dense.gemma",
    "dense.phi3",
    "moe.moe",
    "mla.deepseek",
    "moe.glm4_moe",
    "dense.smollm3",
    "dense.olmo",
    "moe.minimax",
    "moe.llama4",
    "moe.gpt_oss",
    "hybrid.qwen3_next",
    "hybrid.lfm2",
    "hybrid.granite",
    "hybrid.falcon_h1",
)
FAMILIES: tuple[ArchitectureData, ...] = tuple(import_module(f"{__name__}.{path}").DATA for path in REGISTRY)

# model_type -> architecture, for configs that omit "architectures"
MODEL_TYPES: dict[str, str] = {t: a for fam in FAMILIES for t, a in fam.model_types.items()}
# model_type -> the fields its config class fills in when config.json omits them
CLASS_DEFAULTS: dict[str, dict] = {t: d for fam in FAMILIES for t, d in fam.class_defaults.items()}
# model_type -> {canonical field: the name its config class reads instead}
OWN_FIELDS: dict[str, dict] = {t: d for fam in FAMILIES for t, d in fam.own_fields.items()}
# model_type -> the config class's RoPE base when config.json names none (else 10000)
DEFAULT_ROPE_THETA: dict[str, float] = {t: v for fam in FAMILIES for t, v in fam.rope_theta.items()}
# architecture -> the rotary head width when config.json names none (MLA)
ROPE_HEAD_DIM: dict[str, int] = {a: v for fam in FAMILIES for a, v in fam.rope_head_dim.items()}
# llama.cpp general.architecture -> how its GGUF maps back to Hugging Face
GGUF_ARCHS: dict[str, GGUFArch] = {name: arch for fam in FAMILIES for name, arch in fam.gguf.items()}
# the checks' family tables: hybrids with short-conv or Mamba2 layers (architecture -> family), the
# architectures that read no_rope_layers, and architecture -> the two layer_types its windows may list
HYBRIDS: dict[str, str] = {a: fam.name for fam in FAMILIES if fam.recurrent in ("short_conv", "mamba2")
                           for a in fam.architectures}
NOPE_FAMILIES: tuple[str, ...] = tuple(a for fam in FAMILIES if fam.nope_layers for a in fam.architectures)
WINDOW_FAMILIES: dict[str, tuple[str, str]] = {a: k for fam in FAMILIES for a, k in fam.layer_kinds.items()}
# architectures whose q/k/v always carry a bias, and those with per-head q/k norms (whatever config.json says)
ALWAYS_BIASED: frozenset[str] = frozenset(a for fam in FAMILIES for a in fam.biased)
QK_NORMED: frozenset[str] = frozenset(a for fam in FAMILIES for a in fam.qk_normed)

__all__ = ["ALWAYS_BIASED", "CLASS_DEFAULTS", "DEFAULT_ROPE_THETA", "FAMILIES", "GGUF_ARCHS", "HYBRIDS", "MODEL_TYPES",
           "NOPE_FAMILIES", "OWN_FIELDS", "QK_NORMED", "REGISTRY", "ROPE_HEAD_DIM", "WINDOW_FAMILIES",
           "ArchitectureData", "GGUFArch"]
