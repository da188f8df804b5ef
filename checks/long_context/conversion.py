"""A config.json's rope scaling against the GGUF converted from it (GGF020 where the config sits beside the file).

convert_hf_to_gguf writes yarn and linear scaling as {arch}.rope.scaling.* keys (type, factor,
original_context_length, yarn_attn_factor when the block names an attention_factor), Llama 3.1's llama3 scaling
as the rope_freqs.weight tensor and LongRoPE as rope_factors_long / _short tensors. A converter that skipped
its model's block (llama.cpp#13322: Qwen3-MoE's YaRN never written) gives a file llama.cpp reads unscaled; one
that wrote another factor, original length or attention factor reads far-out positions at the wrong rate, or
scales every logit (vllm#48621: an ignored attention factor, 27 % off). The config side is read as transformers
reads it: `type` for `rope_type`, its aliases, yarn's attention factor from attention_factor / mscale /
mscale_all_dim (reference_engine.core.rope, compared with transformers in the tests)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from checks.long_context.declared import settings
from reference_engine.core.rope import ROPE_TYPE_ALIASES, yarn_attention_factor

BY_KEYS = ("linear", "yarn")              # written as rope.scaling.* keys
BY_TENSORS = {"llama3": ("rope_freqs.weight",), "longrope": ("rope_factors_long.weight",
                                                             "rope_factors_short.weight")}
SAME = 1e-3                               # relative: a float32 round trip and a rounded config are one value


@dataclass(frozen=True)
class ConfigScaling:
    """The full-attention rope scaling of a config.json, as transformers reads it."""
    kind: str
    factor: float | None
    original: int | None
    attention: float | None          # yarn's cos/sin scale (None: not yarn)
    attention_given: bool            # the block sets it (attention_factor, or mscale with mscale_all_dim)


def config_scaling(raw: dict) -> ConfigScaling | None:
    """The config's scaling block, or None where it has none (default rope, or dynamic, which no GGUF carries)."""
    s = settings(raw)
    block = s.rope.get("full_attention", {})
    kind = ROPE_TYPE_ALIASES.get(block.get("rope_type"), block.get("rope_type"))
    if kind not in BY_KEYS and kind not in BY_TENSORS:
        return None
    factor = block.get("factor")
    factor = float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) else None
    original = block.get("original_max_position_embeddings") or s.original
    attention, given = None, False
    if kind == "yarn":
        if factor is None and s.declared and original:
            factor = s.declared / original          # transformers' fallback (DeepSeek-V3's configs)
        attention = yarn_attention_factor(block, factor) if factor else None
        given = block.get("attention_factor") is not None or bool(block.get("mscale") and block.get("mscale_all_dim"))
    return ConfigScaling(kind, factor, original if isinstance(original, int) else None, attention, given)


def _differs(a: float, b: float) -> bool:
    return not math.isclose(float(a), float(b), rel_tol=SAME)


def _describe(c: ConfigScaling) -> str:
    parts = [f"factor {c.factor:g}" if c.factor else None, f"original {c.original}" if c.original else None]
    return f"{c.kind} rope scaling ({', '.join(p for p in parts if p)})" if any(parts) else f"{c.kind} rope scaling"


def conversion_problems(raw: dict, gguf) -> list[str]:
    """One line per way the GGUF's scaling differs from the config.json's block it was converted from."""
    c = config_scaling(raw)
    if c is None:
        return []
    arch = str(gguf.get("general.architecture"))
    where = f"{arch}.rope.scaling"

    def key(name: str):
        return gguf.get(f"{where}.{name}")
    kind = key("type")
    if c.kind in BY_TENSORS:
        names = BY_TENSORS[c.kind]
        missing = [n for n in names if n not in gguf.tensors]
        return [f"config.json's {_describe(c)} is not in the GGUF: no {' / '.join(missing)} tensor, so llama.cpp "
                "reads the model unscaled"] if missing else []
    if kind in (None, "none"):
        reach = f"; past {c.original} positions it reads noise" if c.original else ""
        return [f"config.json's {_describe(c)} is not in the GGUF (no {where}.type): llama.cpp reads the model "
                f"unscaled{reach}"]
    out = []
    if kind != c.kind:
        out.append(f"{where}.type is {kind!r}, config.json's rope scaling is {c.kind!r}")
    factor, original = key("factor"), key("original_context_length")
    if c.factor and isinstance(factor, (int, float)) and _differs(factor, c.factor):
        out.append(f"{where}.factor is {factor:g}, config.json's {c.kind} factor {c.factor:g}")
    if c.original and isinstance(original, int) and original != c.original:
        out.append(f"{where}.original_context_length is {original}, config.json's original_max_position_embeddings "
                   f"{c.original}")
    return out + _attention_problems(c, key("yarn_attn_factor"), key("yarn_log_multiplier"), where)


def _attention_problems(c: ConfigScaling, stored, log_multiplier, where: str) -> list[str]:
    """yarn's attention factor: one the config sets must reach the file (yarn_attn_factor, or DeepSeek's
    yarn_log_multiplier for mscale_all_dim); a stored one must be the config's."""
    if c.kind != "yarn" or c.attention is None:
        return []
    if isinstance(stored, (int, float)) and _differs(stored, c.attention):
        return [f"{where}.yarn_attn_factor is {stored:g}, transformers reads config.json's yarn attention factor "
                f"as {c.attention:.4g}: every attention logit is scaled differently"]
    if c.attention_given and stored is None and log_multiplier is None:
        default = yarn_attention_factor({}, c.factor)
        if _differs(default, c.attention):
            return [f"config.json's yarn attention factor {c.attention:.4g} (as transformers reads "
                    f"attention_factor / mscale / mscale_all_dim) is not in the GGUF (no {where}.yarn_attn_factor): "
                    f"llama.cpp scales by 0.1 ln({c.factor:g}) + 1 = {default:.4g}"]
    return []
