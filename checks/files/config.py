"""Config checks (CFG): config.json names a supported architecture and its numbers describe a model that can run.

These read config.json (and tokenizer_config.json for the context length); no weights, no tokenizer.
"""
from __future__ import annotations

import re

from checks.catalogue.inputs import ResourceError
from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key
from findings import Location
from reference_engine.config import parse_config, read_json, rotary_width
from reference_engine.core.families import SUPPORTED_ARCHITECTURES, is_supported
from reference_engine.errors import ModelDirError, UnsupportedError

# rope type -> fields it needs (transformers' modeling_rope_utils._validate_*_rope_parameters)
ROPE_REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "longrope": ("short_factor", "long_factor"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
LAYER_KINDS = ("full_attention", "sliding_attention")   # per-layer-kind RoPE blocks (Gemma 3)
# transformers fills model_max_length with int(1e30) when a tokenizer declares none: not a real limit
UNSET_MODEL_MAX_LENGTH = 10**18


@check("CFG001", category="config", severity="error", needs=("files",),
       hint="Fix config.json so it parses and names its architecture; the families the engine runs are listed "
            "in docs/families.md (`llmdoctor checks` runs the static checks on any causal decoder).")
def config_parses(ctx):
    """config.json parses and names a supported architecture.

    Every other check and every engine reads config.json first. A file that is not JSON, lacks
    `hidden_size`/`num_attention_heads`/`vocab_size`, or names an architecture this engine does not
    implement (transformers: "does not recognize this architecture") stops everything else, so this
    check reports the exact field that is wrong.

    Remedy: correct the named field. An architecture the reference engine does not implement is reported
    once as info: the static checks (files, weights, vocab, embeddings, tokenizer) still run, only the
    engine-backed ones are skipped.
    """
    path = ctx.model_dir / "config.json"
    try:
        cfg = parse_config(read_json(path), path)
        if not is_supported(cfg.architecture):
            yield Problem(f"architecture {cfg.architecture!r} is not implemented by the reference engine: the "
                          f"engine-backed checks are skipped, the static checks run", severity="info",
                          evidence={"architecture": cfg.architecture, "supported": list(SUPPORTED_ARCHITECTURES)},
                          location=config_key("architectures"))
    except UnsupportedError as e:
        yield Problem(f"unsupported architecture: {e.problem}", evidence={"file": "config.json"},
                      location=config_key("architectures"))
    except ModelDirError as e:
        yield Problem(f"config.json cannot be used: {e.problem}", evidence={"file": "config.json"},
                      location=_error_location(e.problem))


@check("CFG002", category="config", severity="error", needs=("config",),
       hint="Make hidden_size == num_attention_heads * head_dim (or set head_dim explicitly), with "
            "num_key_value_heads dividing num_attention_heads and an even head_dim.")
def attention_geometry(ctx):
    """Attention heads, key/value heads and head_dim fit together.

    Grouped-query attention repeats each key/value head `num_attention_heads / num_key_value_heads`
    times, so the kv-head count must divide the head count; RoPE rotates pairs of dimensions, so
    head_dim must be even; without an explicit `head_dim` the engines compute
    `hidden_size // num_attention_heads`, which silently truncates when it does not divide. A config
    edited by hand (or converted from another format) with a wrong `num_key_value_heads` loads in some
    engines and produces garbage, or fails with a reshape error deep in attention.

    Remedy: restore the numbers from the original checkpoint; the projection shapes in the safetensors
    file (see WGT003) tell what they must be.
    """
    cfg = ctx.config
    heads, kv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    ev = {"hidden_size": cfg.hidden_size, "num_attention_heads": heads, "num_key_value_heads": kv,
          "head_dim": hd, "head_dim_explicit": cfg.head_dim_explicit}
    if not cfg.head_dim_explicit and cfg.hidden_size % heads:
        yield Problem(f"hidden_size {cfg.hidden_size} is not a multiple of num_attention_heads {heads} "
                      f"and no head_dim is given", evidence=ev, location=config_key("hidden_size"))
    if kv > heads or heads % kv:
        yield Problem(f"num_key_value_heads {kv} does not divide num_attention_heads {heads}", evidence=ev,
                      location=config_key("num_key_value_heads"))
    if hd < 2 or hd % 2:
        yield Problem(f"head_dim {hd} must be a positive even number (RoPE rotates dimension pairs)", evidence=ev,
                      location=config_key("head_dim" if cfg.head_dim_explicit else "hidden_size"))


def rope_block(raw: dict) -> tuple[str, dict | None]:
    """('rope_scaling' | 'rope_parameters', the dict) — transformers 5 writes rope_parameters."""
    for key in ("rope_scaling", "rope_parameters"):
        if raw.get(key) is not None:
            return key, raw[key]
    return "rope_scaling", None


@check("CFG003", category="config", severity="error", needs=("config",),
       hint="Give rope_scaling a known 'rope_type' (linear, dynamic, yarn, longrope, llama3) with the fields "
            "that type needs, as in the original checkpoint's config.json.")
def rope_scaling_known(ctx):
    """rope_scaling names a known RoPE type and carries the fields that type needs.

    Long-context models stretch RoPE (linear, dynamic NTK, YaRN, LongRoPE, Llama-3.1 "llama3").
    An engine that does not know the type, or misses a field, falls back to plain RoPE without a word:
    outputs stay exact at short positions and degrade past the original context (unsloth PR#6197,
    rope_scaling dropped, generation degenerates past ~29K tokens; mlx-vlm PR#1710, cosine similarity
    0.757 at position 8192 — short tests never see it). Field rules follow transformers'
    modeling_rope_utils validators.

    Remedy: copy the rope_scaling block of the original model's config.json.
    """
    key, block = rope_block(ctx.raw_config)
    if block is None:
        return
    if not isinstance(block, dict):
        yield Problem(f"'{key}' must be an object, found {type(block).__name__}", evidence={key: repr(block)},
                      location=config_key(key))
        return
    kinds = {k: v for k, v in block.items() if k in LAYER_KINDS}
    if kinds:   # Gemma 3 (transformers 5): one block per layer kind, each checked on its own
        for kind, sub in kinds.items():
            if not isinstance(sub, dict):
                yield Problem(f"'{key}.{kind}' must be an object, found {type(sub).__name__}",
                              evidence={key: repr(block)}, location=config_key(f"{key}.{kind}"))
            else:
                yield from _rope_block_problems(f"{key}.{kind}", sub, ctx)
        return
    yield from _rope_block_problems(key, block, ctx)


def _rope_block_problems(key: str, block: dict, ctx):
    rope_type = block.get("rope_type", block.get("type"))
    ev = {key: block}
    if rope_type is None:
        yield Problem(f"'{key}' has no 'rope_type' (or 'type')", evidence=ev, location=config_key(key))
        return
    if rope_type not in ROPE_REQUIRED:
        yield Problem(f"unknown RoPE type {rope_type!r} in '{key}' (known: {', '.join(ROPE_REQUIRED)})",
                      evidence=ev, location=config_key(f"{key}.{'rope_type' if 'rope_type' in block else 'type'}"))
        return
    missing = [f for f in ROPE_REQUIRED[rope_type] if f not in block]
    if missing:
        yield Problem(f"RoPE type {rope_type!r} needs {', '.join(missing)} in '{key}'", evidence=ev,
                      location=config_key(key))
        return
    yield from _rope_values(rope_type, block, ctx, ev, key)


def _rope_values(rope_type: str, block: dict, ctx, ev: dict, key: str):
    factor = block.get("factor")
    if "factor" in ROPE_REQUIRED[rope_type] and (not _number(factor) or factor < 1.0):
        yield Problem(f"RoPE {rope_type} factor must be a number >= 1, found {factor!r}", evidence=ev,
                      location=config_key(f"{key}.factor"))
    if rope_type == "llama3" and _number(block["low_freq_factor"]) and _number(block["high_freq_factor"]) \
            and block["high_freq_factor"] <= block["low_freq_factor"]:
        yield Problem("RoPE llama3 high_freq_factor must be greater than low_freq_factor", evidence=ev,
                      location=config_key(f"{key}.high_freq_factor"))
    if rope_type == "longrope":   # one factor per rotary pair: rotary_dim / 2 (Phi-4-mini: 48 of head_dim 128)
        half = rotary_width(ctx.raw_config, ctx.config.head_dim, block) // 2
        for name in ("short_factor", "long_factor"):
            values = block[name]
            if not isinstance(values, list) or len(values) != half or not all(_number(v) for v in values):
                yield Problem(f"RoPE longrope {name} must be {half} numbers (rotary_dim / 2)", evidence=ev,
                              location=config_key(f"{key}.{name}"))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@check("CFG004", category="config", severity="warning", needs=("config",),
       hint="Set tokenizer_config.json model_max_length to at most config.json max_position_embeddings.")
def context_length_agrees(ctx):
    """The tokenizer's model_max_length does not exceed the model's max_position_embeddings.

    Truncation uses the tokenizer's `model_max_length`; position embeddings (the RoPE table) cover
    `max_position_embeddings`. When the tokenizer allows more, long inputs pass truncation and then run
    past the positions the model was trained on: garbage output, or an index error in engines that
    precompute the RoPE table to that length. A smaller `model_max_length` only truncates earlier than
    needed and is reported as info.

    Remedy: make the two numbers agree (the model's figure is authoritative).
    """
    try:
        tok_cfg = ctx.tokenizer_config
    except ResourceError as e:
        raise Skip(f"tokenizer_config.json unreadable: {e.message}") from None
    limit = tok_cfg.get("model_max_length")
    if not _number(limit) or limit >= UNSET_MODEL_MAX_LENGTH:
        return
    max_pos = ctx.config.max_position_embeddings
    ev = {"model_max_length": limit, "max_position_embeddings": max_pos}
    if limit > max_pos:
        yield Problem(f"tokenizer model_max_length {limit} exceeds max_position_embeddings {max_pos}", evidence=ev,
                      location=Location(file="tokenizer_config.json", logical="model_max_length"))
    elif limit < max_pos:
        yield Problem(f"tokenizer truncates at {limit} tokens, below max_position_embeddings {max_pos}",
                      evidence=ev, severity="info",
                      location=Location(file="tokenizer_config.json", logical="model_max_length"))


@check("CFG005", category="config", severity="error", needs=("config",),
       hint="Restore rms_norm_eps and max_position_embeddings from the original config.json.")
def numeric_fields_sane(ctx):
    """rms_norm_eps and max_position_embeddings are in a range a model can run with.

    An `rms_norm_eps` of 0 divides by zero on an all-zero hidden state (NaN); a huge one (above
    `max_rms_norm_eps`, default 1e-2) flattens every activation; a non-positive `max_position_embeddings`
    leaves no positions at all. These come from hand edits and broken converters. (A `rope_theta` <= 0
    cannot describe a RoPE table at all: the config parser refuses it and CFG001 names the field.)

    Remedy: restore the original values.
    """
    cfg = ctx.config
    ev = {"rms_norm_eps": cfg.rms_norm_eps, "max_position_embeddings": cfg.max_position_embeddings}
    max_eps = ctx.threshold("CFG005", "max_rms_norm_eps", 1e-2)
    if not 0 < cfg.rms_norm_eps <= max_eps:
        yield Problem(f"rms_norm_eps {cfg.rms_norm_eps} outside (0, {max_eps}]", evidence=ev,
                      location=config_key("rms_norm_eps"))
    if cfg.max_position_embeddings < 1:
        yield Problem(f"max_position_embeddings {cfg.max_position_embeddings} must be positive", evidence=ev,
                      location=config_key("max_position_embeddings"))



def _error_location(problem: str) -> Location:
    """Where a config.json parse error points: the line of invalid JSON, or the field it names."""
    line = re.search(r"invalid JSON: .* at line (\d+)", problem)
    if line:
        return Location(file="config.json", line=int(line.group(1)))
    field = re.search(r"'([A-Za-z_][\w.]*)'", problem)
    return config_key(field.group(1) if field else None)
