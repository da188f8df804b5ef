"""Engine families: which architectures the core runs, and how (see base.py for what a family provides).

`bind(config)` resolves a config's family once and caches it, with its parsed settings, on `config.family`;
`settings(config)`, `layer_plan(config, n)`, `windows(config)`, `mixers(config)` and `cache_layout(config)` are
what the loader, the forward and the cache use.
"""
from __future__ import annotations

from reference_engine.config import ModelConfig
from reference_engine.core.cache.layout import LayerCache
from reference_engine.core.families import gemma, gpt_oss, llama, moe, phi3
from reference_engine.core.families.base import Bound, Family, LayerPlan, MoESettings, Settings
from reference_engine.errors import UnsupportedError

FAMILIES: tuple[Family, ...] = (llama.FAMILY, gemma.FAMILY, phi3.FAMILY, moe.FAMILY, gpt_oss.FAMILY)
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


__all__ = ["FAMILIES", "SUPPORTED_ARCHITECTURES", "Bound", "Family", "LayerPlan", "MoESettings", "Settings",
           "bind", "cache_layout", "is_supported", "layer_plan", "mixers", "settings", "windows"]
