"""One reading of a config's long-context settings, from the raw config.json dict (or the one a
GGUF's metadata gives): the rope blocks per layer kind, the rotary width, the declared and original lengths, the
layer kinds and the window. Pure functions: the CFG, GGF and DIF checks all read through `settings(raw)`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from reference_engine.config import rotary_width

KINDS = ("full_attention", "sliding_attention")
SCALED = ("linear", "dynamic", "yarn", "longrope", "llama3")
MIN_ROTARY_HALF = 16      # narrower rotary widths (toy models) turn fast by design: no wavelength claim judged
MANY_TIMES = 2.0          # declared / original length without scaling: claims past what the rope was set up for


@dataclass
class Settings:
    declared: int | None                        # max_position_embeddings
    rope: dict = field(default_factory=dict)    # layer kind -> its rope block (rope_type, rope_theta, ...)
    rope_key: str = "rope_scaling"              # where the full layers' block lives in config.json
    rotary_half: int | None = None              # rotary_dim / 2 (partial_rotary_factor applied)
    layer_types: list | None = None
    layers: int | None = None
    window: int | None = None                   # sliding_window (None: none, or switched off)
    original: int | None = None                 # original_max_position_embeddings (block or top level)
    chunk: int | None = None                    # attention_chunk_size
    pattern: bool = False                       # layer kinds listed (layer_types, sliding_window_pattern)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _blocks(raw: dict) -> tuple[str, dict]:
    """layer kind -> rope block (type and theta filled in from the top level where the block leaves them)."""
    theta = raw.get("rope_theta")
    key, block = "rope_scaling", raw.get("rope_scaling")
    params = raw.get("rope_parameters")
    if not isinstance(block, dict) and isinstance(params, dict):
        key, block = "rope_parameters", params
    block = block if isinstance(block, dict) else {}
    if any(isinstance(block.get(k), dict) for k in KINDS):
        out = {k: dict(block[k]) for k in KINDS if isinstance(block.get(k), dict)}
    else:
        out = {"full_attention": dict(block)}
        if raw.get("rope_local_base_freq") is not None:
            out["sliding_attention"] = {"rope_type": "default", "rope_theta": raw["rope_local_base_freq"]}
    for b in out.values():
        b.setdefault("rope_type", b.get("type", "default"))
        if b.get("rope_theta") is None and theta is not None:
            b["rope_theta"] = theta
    return key, out


def settings(raw: dict) -> Settings:
    key, rope = _blocks(raw)
    heads, hidden = _int(raw.get("num_attention_heads")), _int(raw.get("hidden_size"))
    head_dim = _int(raw.get("head_dim")) or (hidden // heads if heads and hidden else None)
    full = rope["full_attention"]
    use_window = raw.get("use_sliding_window", True) is not False
    return Settings(declared=_int(raw.get("max_position_embeddings")), rope=rope, rope_key=key,
                    rotary_half=rotary_width(raw, head_dim, rope["full_attention"]) // 2 if head_dim else None,
                    layer_types=raw.get("layer_types") if isinstance(raw.get("layer_types"), list) else None,
                    layers=_int(raw.get("num_hidden_layers")),
                    window=_int(raw.get("sliding_window")) if use_window else None,
                    original=_int(full.get("original_max_position_embeddings"))
                    or _int(raw.get("original_max_position_embeddings")),
                    chunk=_int(raw.get("attention_chunk_size")),
                    pattern=isinstance(raw.get("layer_types"), list) or "sliding_window_pattern" in raw)


def longest_wavelength(theta: float, rotary_half: int) -> float:
    """Positions the slowest rotary pair needs for one turn: 2 pi theta^((d - 2) / d), d = rotary_dim. Past it
    every pair has turned at least once and positions start to alias."""
    d = 2 * rotary_half
    return 2 * math.pi * theta ** ((d - 2) / d)


def scaling_problems(s: Settings) -> list[tuple[str, str]]:
    """(message, logical key) for rope scaling blocks that are incomplete or disagree with the rest of the
    config, beyond CFG003's required fields: yarn's original length, longrope's list lengths against the
    rotary width (partial_rotary_factor), the declared length against original x factor."""
    out = []
    for kind, b in s.rope.items():
        where = f"{s.rope_key}.{kind}" if len(s.rope) > 1 or kind != "full_attention" else s.rope_key
        kind_type, factor = b.get("rope_type"), _num(b.get("factor"))
        original = _int(b.get("original_max_position_embeddings")) or s.original
        if kind_type == "yarn" and original is None:
            out.append(("yarn rope scaling without original_max_position_embeddings: the engine takes "
                        f"max_position_embeddings ({s.declared}) as the trained length and stretches nothing "
                        "where it should", f"{where}.original_max_position_embeddings"))
        if kind_type == "longrope" and s.rotary_half:
            for name in ("short_factor", "long_factor"):
                values = b.get(name)
                if isinstance(values, list) and len(values) != s.rotary_half:
                    out.append((f"longrope {name} has {len(values)} factors, the rotary width needs "
                                f"{s.rotary_half} (rotary_dim / 2 with partial_rotary_factor)", f"{where}.{name}"))
        # twice past the stretch: the block and the length came from different models (a few percent apart is
        # a rounded config, as tiny test models and some exports write them)
        if kind_type in ("yarn", "llama3", "linear") and factor and original and s.declared and \
                s.declared > original * factor * 2:
            out.append((f"{kind_type} rope scaling stretches {original} positions by {factor:g} to "
                        f"{original * factor:.0f}, but max_position_embeddings declares {s.declared}",
                        "max_position_embeddings"))
        if original and s.declared and original > s.declared and kind_type in SCALED:
            out.append((f"original_max_position_embeddings {original} is past max_position_embeddings "
                        f"{s.declared}: the scaling never applies", f"{where}.original_max_position_embeddings"))
    return out


def unscaled_claim(s: Settings, evidence=(), read=()) -> tuple[str, str] | None:
    """(message, key) when the config claims many times the positions its rope was set up for, with no
    scaling: an original length it states, the rope's longest wavelength, or its base and the training length
    the files state (evidence: trained_length.LengthEvidence; read: every source looked at)."""
    full = s.rope.get("full_attention", {})
    if full.get("rope_type") != "default" or not s.declared:
        return None
    if s.original and s.declared >= MANY_TIMES * s.original:
        return (f"max_position_embeddings {s.declared} is {s.declared / s.original:.0f}x the "
                f"original_max_position_embeddings {s.original}, with no rope scaling to reach it (a dropped "
                "rope_scaling block)", "max_position_embeddings")
    theta = _num(full.get("rope_theta"))
    wave = longest_wavelength(theta, s.rotary_half) if theta and (s.rotary_half or 0) >= MIN_ROTARY_HALF else None
    if wave and s.declared > MANY_TIMES * wave:
        return (f"max_position_embeddings {s.declared} is {s.declared / wave:.1f}x the longest rotary "
                f"wavelength of rope_theta {theta:g} ({wave:.0f} positions), with no rope scaling",
                "max_position_embeddings")
    return base_claim(s, theta, evidence, read) if theta else None


def rope_reach(s: Settings) -> int:
    """The farthest distance the rope is asked to tell apart: the declared length, or a window on every layer
    (no layer kinds listed) below it: attention never looks further back (Mistral-7B-v0.1: 4096 of 32768)."""
    if s.window and not s.pattern and s.window < s.declared:
        return s.window
    return s.declared


def base_claim(s: Settings, theta: float, evidence, read) -> tuple[str, str] | None:
    """A declared length past the rope base with no scaling, that no training length in the files supports.

    Unscaled checkpoints declare at most about their base in positions (Llama 2 and Phi-3-mini-4k 4096 at
    10k, Gemma 1/2 8192 at 10k, SmolLM2 8192 at 100k, Qwen2 and Gemma 3 32768 at 1M; Mistral-Nemo's 1024000
    at 1M the boldest), so a reach past the base is a claim the rope settings do not support. It is a finding
    when a length the files state is MANY_TIMES below it too, or, where they state none, when the reach is
    MANY_TIMES the base."""
    reach = rope_reach(s)
    if reach <= theta:
        return None
    longest = max(evidence, key=lambda e: e.tokens, default=None)
    if longest is not None and reach < MANY_TIMES * longest.tokens:
        return None                  # the files say the model was meant to run this long
    if longest is None and reach < MANY_TIMES * theta:
        return None
    files = (f"{longest.source} says {longest.tokens} ({reach / longest.tokens:.0f}x less)" if longest else
             f"no training length in the files ({', '.join(read)})")
    what = f"max_position_embeddings {s.declared}" if reach == s.declared else \
        f"a window of {reach} on every layer"
    return (f"{what} is {reach / theta:.1f}x rope_theta {theta:g} with no rope "
            f"scaling and no original_max_position_embeddings (unscaled checkpoints declare at most about their "
            f"base), and {files}: positions past the trained length read as noise", "max_position_embeddings")


def layer_problems(s: Settings, *, counts_layers: bool = True) -> list[tuple[str, str]]:
    """layer_types against num_hidden_layers (unless counts_layers is False) and the window."""
    types, out = s.layer_types, []
    if types is None:
        return out
    if counts_layers and s.layers is not None and len(types) != s.layers:
        out.append((f"layer_types lists {len(types)} layers, num_hidden_layers is {s.layers}", "layer_types"))
    odd = sorted({repr(t) for t in types if not isinstance(t, str) or not t})
    if odd:
        out.append((f"layer_types holds values that name no layer kind: {', '.join(odd)}", "layer_types"))
    if "sliding_attention" in types and not s.window:
        out.append(("layer_types has sliding_attention layers but no sliding_window (or it is switched off): "
                    "they attend to everything", "sliding_window"))
    return out


def window_problems(s: Settings) -> list[tuple[str, str]]:
    """The window against the pattern: on every layer where the config lists kinds, and local layers whose
    rope base is above the global layers' (Gemma 3's bases swapped)."""
    out, types = [], s.layer_types
    if types and s.window and s.declared and s.window < s.declared and \
            all(t == "sliding_attention" for t in types) and len(types) > 1:
        out.append((f"every one of the {len(types)} layers is sliding_attention with a window of {s.window}: "
                    f"nothing reads past {s.window} tokens of the declared {s.declared}", "layer_types"))
    local, full = s.rope.get("sliding_attention"), s.rope.get("full_attention")
    if local and full and _num(local.get("rope_theta")) and _num(full.get("rope_theta")) and \
            _num(local["rope_theta"]) > _num(full["rope_theta"]):
        out.append((f"the sliding layers' rope base {local['rope_theta']:g} is above the full layers' "
                    f"{full['rope_theta']:g}: local and global bases look swapped", s.rope_key))
    return out
