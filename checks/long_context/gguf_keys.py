"""A GGUF's rope and context keys judged on their own (GGF020 where no config.json sits beside the file): against
each other, against what llama.cpp does with each (src/llama-model.cpp, load_hparams, at the pinned llama.cpp) and
against what the architecture needs. Read as stored: the config the engine rebuilds from them (gguf_config.py)
leaves out a scaling block it cannot read, so CFG060-CFG063, which read that config on a GGUF too, never see these.
Left to those and to GGF007 (Llama 3.1 rope_freqs) and GGF010 (no context_length, rope.dimension_count): yarn
without its original length (CFG060), many times the rope's wavelength without scaling (CFG061), swapped local and
global bases (CFG063). A context past original x factor is said here and by GGF010 (which reads no further)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from checks.long_context.declared import MANY_TIMES
from reference_engine.files.gguf_arch import ARCHS, EXTRA_TENSORS

LLAMA_CPP_TYPES = ("none", "linear", "yarn", "longrope")     # llama_rope_scaling_type_from_string; others abort
BY_FACTOR = ("linear", "yarn")    # stretched by rope.scaling.factor (longrope by its rope_factors_* tensors)
SAME_LENGTH = 0.001               # relative: lengths this close are one length (GGF010's tolerance too)
LLAMA_CPP_BASE = 10000.0          # rope_freq_base_train when the file has no rope.freq_base
# architectures whose layers llama.cpp makes sliding by its own pattern, and what it does without a window
NEEDS_WINDOW = {"gemma3": "llama.cpp runs every layer as full attention (Gemma 3's local layers read a window)",
                "gpt-oss": "llama.cpp refuses the file (attention.sliding_window is a required key for it)"}


@dataclass(frozen=True)
class RopeKeys:
    """The {arch}.* keys that set how far a GGUF reads, as stored (None: absent)."""
    arch: str
    context: object                 # context_length
    base: object                    # rope.freq_base
    base_swa: object                # rope.freq_base_swa
    kind: object                    # rope.scaling.type
    factor: object                  # rope.scaling.factor, else the old rope.scale_linear (llama.cpp reads both)
    factor_key: str
    original: object                # rope.scaling.original_context_length
    window: object                  # attention.sliding_window
    factor_tensors: tuple = ()      # rope_freqs / rope_factors_long / _short: scaling stored as tensors


def read_keys(gguf) -> RopeKeys:
    arch = str(gguf.get("general.architecture"))

    def key(name):
        return gguf.get(f"{arch}.{name}")
    old_key = key("rope.scaling.factor") is None and key("rope.scale_linear") is not None
    factor_key = "rope.scale_linear" if old_key else "rope.scaling.factor"
    return RopeKeys(arch, key("context_length"), key("rope.freq_base"), key("rope.freq_base_swa"),
                    key("rope.scaling.type"), key(factor_key), factor_key,
                    key("rope.scaling.original_context_length"), key("attention.sliding_window"),
                    tuple(t for t in EXTRA_TENSORS if t in gguf.tensors))


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _positive(value) -> bool:
    v = _number(value)
    return v is not None and math.isfinite(v) and v > 0


def _stretches(k: RopeKeys) -> bool:
    """A scaling factor llama.cpp would apply: present, positive and not 1."""
    return _positive(k.factor) and _number(k.factor) != 1.0


def base_problems(k: RopeKeys) -> list[str]:
    out = []
    if k.base is None and k.arch in ARCHS:
        out.append(f"no {k.arch}.rope.freq_base: llama.cpp takes {LLAMA_CPP_BASE:g} whatever base the model was "
                   "trained with (convert_hf_to_gguf writes the config's rope_theta whenever it has one)")
    for name, value in (("rope.freq_base", k.base), ("rope.freq_base_swa", k.base_swa)):
        if value is not None and not _positive(value):
            out.append(f"{k.arch}.{name} is {value!r}, not a positive number: every rotary frequency is "
                       "undefined or zero")
    return out


def scaling_problems(k: RopeKeys) -> list[str]:
    out, where = [], f"{k.arch}.rope.scaling"
    if k.kind is not None and k.kind not in LLAMA_CPP_TYPES:
        out.append(f"{where}.type is {k.kind!r}, none of llama.cpp's ({', '.join(LLAMA_CPP_TYPES)}): it aborts "
                   "loading the file")
    elif k.kind == "longrope" and not any("rope_factors" in t for t in k.factor_tensors):
        out.append(f"{where}.type is longrope but the file has no rope_factors_long / rope_factors_short tensors: "
                   "llama.cpp has no factors to stretch by")
    elif k.kind in BY_FACTOR and not _positive(k.factor):
        out.append(f"{where}.type is {k.kind} but {k.arch}.{k.factor_key} is {k.factor!r}: llama.cpp stretches "
                   "nothing (scale 1), the model reads as if unscaled")
    elif k.kind is None and _stretches(k):
        out.append(f"{k.arch}.{k.factor_key} {k.factor:g} with no {where}.type: llama.cpp applies it as linear "
                   "scaling (its default type), readers of the scaling block (this engine, a re-export) do not")
    unscaled = k.kind in (None, "none") and not _stretches(k) and not k.factor_tensors
    if unscaled and _positive(k.original) and _positive(k.context) and k.context >= MANY_TIMES * k.original:
        out.append(f"context_length {k.context} is {k.context / k.original:.0f}x {where}.original_context_length "
                   f"{k.original}, with no rope scaling to reach it (a dropped {where}.type / factor)")
    return out + reach_problems(k)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= SAME_LENGTH * max(a, b)


def reach_problems(k: RopeKeys) -> list[str]:
    """context_length against original_context_length x factor under linear or yarn scaling: a converter writes
    the stretched length (DeepSeek-V3: 4096 x 40), or the original one (Qwen2.5 with yarn); anything else is a
    factor or a length from another model. Past the reach GGF010 says it too."""
    if k.kind not in BY_FACTOR or not (_stretches(k) and _positive(k.original) and _positive(k.context)):
        return []
    reach, where = k.original * k.factor, f"{k.arch}.rope.scaling"
    stretch = f"{where}.original_context_length {k.original} x factor {k.factor:g} = {reach:g}"
    if _same(k.context, reach) or _same(k.context, k.original):
        return []
    if k.context > reach:
        return [f"context_length {k.context} is past what {k.kind} scaling reaches: {stretch}"]
    if k.context > k.original:
        return [f"context_length {k.context} is neither the original length nor the stretched one ({stretch}): "
                "the factor or the length comes from another model"]
    return [f"context_length {k.context} is below {where}.original_context_length {k.original}: the {k.kind} "
            "scaling never applies"]


def window_problems(k: RopeKeys) -> list[str]:
    out = []
    window = _number(k.window)
    if k.arch in NEEDS_WINDOW and not (window and window > 0):
        out.append(f"{k.arch}.attention.sliding_window is {k.window!r}: {NEEDS_WINDOW[k.arch]}")
    if window and _positive(k.context) and window > k.context:
        out.append(f"{k.arch}.attention.sliding_window {k.window} is wider than context_length {k.context}: the "
                   "window never applies and the sliding layers read everything (a window or a context length "
                   "from another model)")
    if k.context is not None and not _positive(k.context):
        out.append(f"{k.arch}.context_length is {k.context!r}: llama.cpp has no trained length to size the "
                   "context or the rope scaling by")
    return out


def key_problems(gguf) -> tuple[list[str], dict]:
    """(one line per problem, the keys read) for a GGUF with no config.json to compare with."""
    k = read_keys(gguf)
    evidence = {"context_length": k.context, "rope_freq_base": k.base, "rope_freq_base_swa": k.base_swa,
                "rope_scaling_type": k.kind, "rope_scaling_factor": k.factor,
                "original_context_length": k.original, "sliding_window": k.window}
    evidence = {name: repr(v) if isinstance(v, float) and not math.isfinite(v) else v     # JSON has no NaN
                for name, v in evidence.items()}
    return base_problems(k) + scaling_problems(k) + window_problems(k), evidence
