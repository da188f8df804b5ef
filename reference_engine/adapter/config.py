"""adapter_config.json of a PEFT LoRA adapter: the fields that decide what the adapter changes and by how much.

Every field is type-checked into a one-line ModelDirError; features that change the forward beyond a merged
weight (activated LoRA, layer replication, LoRA on raw parameters, bias terms) are refused with
UnsupportedError rather than run wrong. How peft reads them (peft/tuners/lora/config.py, model.py):
scale = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora; rank_pattern / alpha_pattern override r and
alpha for the modules whose dotted name ends in a pattern (peft.utils.other.get_pattern_key, first match wins).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from reference_engine.config import read_json
from reference_engine.errors import ModelDirError, UnsupportedError

ADAPTER_CONFIG = "adapter_config.json"


@dataclass
class AdapterConfig:
    path: Path
    r: int
    lora_alpha: float
    target_modules: list[str] | str | None = None     # a list of names or one regex (peft)
    modules_to_save: list[str] = field(default_factory=list)
    base_model_name_or_path: str | None = None
    use_rslora: bool = False
    use_dora: bool = False
    fan_in_fan_out: bool = False
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    layers_to_transform: list[int] | None = None
    layers_pattern: list[str] | str | None = None
    exclude_modules: list[str] | str | None = None
    trainable_token_indices: list[int] | dict[str, list[int]] | None = None
    raw: dict = field(default_factory=dict, repr=False)

    def pattern_key(self, patterns: dict, module: str) -> str | None:
        for key in patterns:
            if re.match(rf"(.*\.)?({key})$", module):
                return key
        return None

    def rank_of(self, module: str) -> int:
        key = self.pattern_key(self.rank_pattern, module)
        return self.rank_pattern[key] if key is not None else self.r

    def alpha_of(self, module: str) -> float:
        key = self.pattern_key(self.alpha_pattern, module)
        return self.alpha_pattern[key] if key is not None else self.lora_alpha

    def scale_of(self, module: str) -> float:
        r, alpha = self.rank_of(module), self.alpha_of(module)
        return alpha / math.sqrt(r) if self.use_rslora else alpha / r

    def token_indices(self, module: str, embedding_module: str) -> list[int] | None:
        """The trainable token ids of `module` (a list applies to the input embedding only, as in peft)."""
        tti = self.trainable_token_indices
        if tti is None:
            return None
        if isinstance(tti, list):
            return tti if module == embedding_module else None
        for key, ids in tti.items():
            if re.match(rf"(.*\.)?({key})$", module):
                return ids
        return None


def read_adapter_config(root: Path) -> AdapterConfig:
    path = root / ADAPTER_CONFIG
    raw = read_json(path)
    peft_type = raw.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise UnsupportedError(path, f"peft_type {peft_type!r}: only LoRA adapters are supported")
    for key, what in (("alora_invocation_tokens", "activated LoRA"), ("layer_replication", "layer replication"),
                      ("target_parameters", "LoRA on raw parameters")):
        if raw.get(key):
            raise UnsupportedError(path, f"{key} ({what}) is not supported")
    if raw.get("lora_bias") or raw.get("bias", "none") != "none":
        raise UnsupportedError(path, "trained bias terms (bias / lora_bias) are not supported")
    r = _int(raw, "r", path)
    alpha = raw.get("lora_alpha", r)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ModelDirError(path, f"'lora_alpha' must be a number, found {alpha!r}")
    return AdapterConfig(
        path, r, float(alpha),
        target_modules=_names_or_regex(raw, "target_modules", path),
        modules_to_save=_names_or_regex(raw, "modules_to_save", path, regex=False) or [],
        base_model_name_or_path=_opt_str(raw, "base_model_name_or_path", path),
        use_rslora=_bool(raw, "use_rslora", path), use_dora=_bool(raw, "use_dora", path),
        fan_in_fan_out=_bool(raw, "fan_in_fan_out", path),
        rank_pattern=_pattern(raw, "rank_pattern", path, int), alpha_pattern=_pattern(raw, "alpha_pattern", path),
        layers_to_transform=_layers(raw, path), layers_pattern=_names_or_regex(raw, "layers_pattern", path),
        exclude_modules=_names_or_regex(raw, "exclude_modules", path),
        trainable_token_indices=_token_indices(raw, path), raw=raw)


def _int(raw: dict, key: str, path: Path) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelDirError(path, f"'{key}' must be a positive integer, found {value!r}")
    return value


def _bool(raw: dict, key: str, path: Path) -> bool:
    value = raw.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ModelDirError(path, f"'{key}' must be true or false, found {value!r}")
    return value


def _opt_str(raw: dict, key: str, path: Path) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ModelDirError(path, f"'{key}' must be a string, found {value!r}")
    return value or None


def _names_or_regex(raw: dict, key: str, path: Path, regex: bool = True):
    value = raw.get(key)
    if value is None or (regex and isinstance(value, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return sorted(value)
    raise ModelDirError(path, f"'{key}' must be a list of module names{' or a regex' if regex else ''}, "
                              f"found {value!r}")


def _pattern(raw: dict, key: str, path: Path, kind=(int, float)) -> dict:
    value = raw.get(key) or {}
    if not isinstance(value, dict) or any(isinstance(v, bool) or not isinstance(v, kind) or v <= 0
                                          for v in value.values()):
        raise ModelDirError(path, f"'{key}' must map module patterns to positive numbers, found {value!r}")
    for k in value:
        try:
            re.compile(k)
        except re.error as e:
            raise ModelDirError(path, f"'{key}': pattern {k!r} is not a regex: {e}") from None
    return dict(value)


def _layers(raw: dict, path: Path) -> list[int] | None:
    value = raw.get("layers_to_transform")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    raise ModelDirError(path, f"'layers_to_transform' must be a layer index or a list of them, found {value!r}")


def _token_indices(raw: dict, path: Path):
    value = raw.get("trainable_token_indices")
    ids = lambda v: isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0  # noqa
                                                 for i in v)
    if value is None or ids(value):
        return value
    if isinstance(value, dict) and all(isinstance(k, str) and ids(v) for k, v in value.items()):
        return value
    raise ModelDirError(path, f"'trainable_token_indices' must be a list of token ids or a map of module name "
                              f"to token ids, found {value!r}")
