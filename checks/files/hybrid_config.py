"""Config and tensor checks of hybrid models (CFG040-CFG043): LFM2's short convolutions, Granite 4's and
Falcon-H1's Mamba2 layers beside attention (Falcon-H1's own multipliers and switches: falcon_h1_config.py).
`layer_types` must say what every layer is; the Mamba2 decay parameters must have the sign and range the
formula A = -exp(A_log), dt = softplus(x + dt_bias) needs; the conv taps and the state sizes the config
declares must match the tensors. Reads config.json and tensor headers (plus the few small per-head vectors
A_log, dt_bias, D); no engine."""
from __future__ import annotations

import math

import torch

from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key
from reference_engine.architectures import HYBRIDS
from reference_engine.architectures.hybrid.falcon_h1 import CLASS_DEFAULTS as FALCON_H1_DEFAULTS
from reference_engine.architectures.hybrid.mamba2 import DEFAULTS as MAMBA2_DEFAULTS

# every per-layer type transformers' hybrid and sliding configs write
KNOWN_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention", "linear_attention",
                               "conv", "mamba", "attention"})
A_LOG_RANGE = (-5.0, 10.0)    # A = -exp(A_log) in [-22026, -0.0067]: outside, a head never or always forgets
DT_RANGE = (1e-4, 10.0)       # softplus(dt_bias): the step size a zero input gets



@check("CFG040", category="config", severity="error", needs=("config",),
       hint="Give `layer_types` one entry per layer (num_hidden_layers), each a type the architecture knows "
            "(LFM2: conv / full_attention; Granite 4: mamba / attention), as the original config.json.")
def layer_types_cover_layers(ctx):
    """`layer_types` lists every layer of a hybrid once, and every model's with types the architecture knows.

    A hybrid reads `layer_types` to decide which layers are recurrent (a conv or Mamba2 state per sequence)
    and which attend (a KV cache per token). A list shorter than num_hidden_layers leaves layers undefined
    (transformers raises, others index past the end), a longer one was written for another depth (pruned or
    merged models), and a misspelt entry ("mamba2", "full") makes loaders fall back to attention for that
    layer or crash. LFM2's older `full_attn_idxs` must name layers that exist.
    """
    raw, n = ctx.raw_config, ctx.config.num_hidden_layers
    types = raw.get("layer_types")
    if types is None:
        idxs = raw.get("full_attn_idxs") if ctx.config.architecture == "Lfm2ForCausalLM" else None
        bad = [i for i in idxs or [] if not isinstance(i, int) or not 0 <= i < n]
        if bad:
            yield Problem(f"full_attn_idxs names layers that do not exist: {bad[:5]} (num_hidden_layers {n})",
                          evidence={"full_attn_idxs": idxs, "num_hidden_layers": n},
                          location=config_key("full_attn_idxs"))
        return
    if not isinstance(types, list):
        yield Problem(f"layer_types must be a list, found {type(types).__name__}", location=config_key("layer_types"))
        return
    if len(types) != n and ctx.config.architecture in HYBRIDS:   # other models' layer count is CFG062's
        yield Problem(f"layer_types lists {len(types)} layers, num_hidden_layers is {n}",
                      evidence={"layer_types": len(types), "num_hidden_layers": n}, location=config_key("layer_types"))
    unknown = sorted({str(t) for t in types if t not in KNOWN_LAYER_TYPES})
    if unknown:
        yield Problem(f"layer_types has unknown type(s) {unknown[:5]} (known: {', '.join(sorted(KNOWN_LAYER_TYPES))})",
                      evidence={"unknown": unknown}, location=config_key("layer_types"))


def mamba_vectors(ctx, suffix: str) -> dict[str, torch.Tensor]:
    """The Mamba2 layers' vectors named `suffix` (a Gated DeltaNet's linear_attn.A_log is another formula, with
    its own ranges: CFG050/CFG051)."""
    names = [n for n in ctx.weights.names if n.endswith(suffix) and ".linear_attn." not in n]
    return {n: ctx.weights.get(n).float() for n in names}


@check("CFG041", category="config", severity="error", needs=("config", "weights"),
       hint="Re-export A_log as log(-A) and dt_bias as the inverse softplus of the step size, as the original "
            "checkpoint stores them (a converter that writes A or dt itself gets the sign or scale wrong).")
def mamba_decay_parameters(ctx):
    """Mamba2's decay parameters have the sign and range their formula needs.

    A Mamba2 layer decays its state by exp(dt * A) per token with A = -exp(A_log) and
    dt = clamp(softplus(x + dt_bias), time_step_limit). A_log is therefore a log of a positive rate: a
    checkpoint holding A itself (negative values) in A_log gives A ~ 0, a state that never forgets (outputs
    drift and blow up over long generations); A_log above 10 forgets everything at once. A dt_bias whose
    softplus lies outside (1e-4, 10) or outside time_step_limit pins every step to the limit. These are
    warnings; non-finite values are an error. Applies to models with Mamba2 layers (`*.A_log`, `*.dt_bias`).
    """
    a_logs, dt_biases = mamba_vectors(ctx, ".A_log"), mamba_vectors(ctx, ".dt_bias")
    if not a_logs and not dt_biases:
        raise Skip("no Mamba2 layers (no A_log / dt_bias tensors)")
    for name, t in {**a_logs, **dt_biases}.items():
        if not torch.isfinite(t).all():
            yield Problem(f"{name} holds non-finite values",
                          location=config_key(name))
            return
    for name, t in a_logs.items():
        low, high = A_LOG_RANGE
        if float(t.max()) < -1:                   # every head: A > -0.37 (what A itself, stored, looks like)
            yield Problem(f"{name} is below -1 throughout (max {float(t.max()):.3g}): it looks like A itself, "
                          f"not log(-A); A = -exp(A_log) ~ {-math.exp(float(t.max())):.3g}, a state that barely "
                          "decays", severity="warning",
                          evidence={"tensor": name, "min": float(t.min()), "max": float(t.max())})
            return
        if float(t.min()) < low or float(t.max()) > high:
            yield Problem(f"{name} ranges {float(t.min()):.3g}..{float(t.max()):.3g}, outside {low}..{high}: "
                          f"A = -exp(A_log) makes some head never or always forget",
                          severity="warning", evidence={"tensor": name, "min": float(t.min()), "max": float(t.max())})
            return
    limit = _time_step_limit(ctx.raw_config)
    for name, t in dt_biases.items():
        dt = torch.nn.functional.softplus(t)
        low, high = max(DT_RANGE[0], limit[0]), min(DT_RANGE[1], limit[1])
        if float(dt.min()) < low or float(dt.max()) > high:
            yield Problem(f"softplus({name}) ranges {float(dt.min()):.3g}..{float(dt.max()):.3g}, outside "
                          f"{low:.3g}..{high:.3g}: the step size is pinned to a limit",
                          severity="warning",
                          evidence={"tensor": name, "dt_min": float(dt.min()), "dt_max": float(dt.max()),
                                    "time_step_limit": list(limit)})
            return


def _time_step_limit(raw: dict) -> tuple[float, float]:
    limit = raw.get("time_step_limit")
    if not isinstance(limit, (list, tuple)) or len(limit) != 2:
        return 0.0, math.inf
    vals = [float(v["__float__"]) if isinstance(v, dict) and "__float__" in v else v for v in limit]
    return (float(vals[0]), float(vals[1])) if all(isinstance(v, (int, float)) for v in vals) else (0.0, math.inf)


def conv_expectations(ctx) -> list[tuple[str, str, tuple[int, ...]]]:
    """(config key, tensor suffix, expected shape) of a recurrent layer's tensors, from config.json alone."""
    raw, h = ctx.raw_config, ctx.config.hidden_size
    if HYBRIDS.get(ctx.config.architecture) == "lfm2":
        k = raw.get("conv_L_cache", 3)
        return [("conv_L_cache", ".conv.conv.weight", (h, 1, k)), ("hidden_size", ".conv.in_proj.weight", (3 * h, h))]
    heads, state, groups, conv = (raw.get(k, MAMBA2_DEFAULTS[k]) for k in ("mamba_n_heads", "mamba_d_state",
                                                                            "mamba_n_groups", "mamba_d_conv"))
    inner_key, inner = mamba_inner(ctx)
    conv_dim = inner + 2 * groups * state
    # the tensors that depend on one size first, so that the finding names the key that is off
    return [(inner_key, ".mamba.out_proj.weight", (h, inner)), (inner_key, ".mamba.norm.weight", (inner,)),
            ("mamba_n_heads", ".mamba.A_log", (heads,)), ("mamba_d_conv", ".mamba.conv1d.weight", (conv_dim, 1, conv)),
            ("mamba_d_state", ".mamba.in_proj.weight", (inner + conv_dim + heads, h))]


def mamba_inner(ctx) -> tuple[str, int]:
    """(config key, value) of the Mamba2 inner size: Falcon-H1's mamba_d_ssm (its class default when absent,
    mamba_expand x hidden_size when null), else mamba_expand x hidden_size."""
    raw, d_ssm = ctx.raw_config, FALCON_H1_DEFAULTS["mamba_d_ssm"]
    if HYBRIDS.get(ctx.config.architecture) == "falcon_h1" and raw.get("mamba_d_ssm", d_ssm) is not None:
        return "mamba_d_ssm", raw.get("mamba_d_ssm", d_ssm)
    return "mamba_expand", raw.get("mamba_expand", MAMBA2_DEFAULTS["mamba_expand"]) * ctx.config.hidden_size


@check("CFG042", category="config", severity="error", needs=("config", "weights"),
       hint="Restore the conv and state sizes of config.json (conv_L_cache; mamba_d_conv, mamba_d_state, "
            "mamba_n_heads, mamba_n_groups, mamba_expand, mamba_d_head; Falcon-H1: mamba_d_ssm) from the original "
            "checkpoint.")
def recurrent_sizes_match_tensors(ctx):
    """The conv taps and recurrent state sizes config.json declares agree with the tensors.

    A recurrent layer's state per sequence is sized from config.json (LFM2: hidden x (conv_L_cache - 1);
    Mamba2: the conv window plus heads x head_dim x d_state), and the tensors must match: a conv weight with
    3 taps under conv_L_cache 4 makes a cache keep the wrong window (llama.cpp sizes its state from the
    GGUF metadata), an in_proj whose rows do not split into z, xBC and dt makes every loader refuse or split
    wrongly. Mamba2 also needs mamba_n_heads x mamba_d_head = mamba_expand x hidden_size (Falcon-H1:
    mamba_d_ssm) and heads divisible by groups. The finding names the config key and the tensor.
    """
    arch = ctx.config.architecture
    if arch not in HYBRIDS:
        raise Skip("not an LFM2, Granite 4 or Falcon-H1 hybrid")
    raw = ctx.raw_config
    if HYBRIDS[arch] in ("granite", "falcon_h1"):
        heads, groups = (raw.get(k, MAMBA2_DEFAULTS[k]) for k in ("mamba_n_heads", "mamba_n_groups"))
        (inner_key, inner), head_dim = mamba_inner(ctx), raw.get("mamba_d_head", "auto")
        head_dim = inner // heads if head_dim == "auto" and isinstance(heads, int) and heads else head_dim
        if not (isinstance(heads, int) and isinstance(groups, int) and isinstance(inner, int)
                and isinstance(head_dim, int) and heads > 0 and groups > 0 and heads % groups == 0
                and heads * head_dim == inner):
            size = "mamba_d_ssm" if inner_key == "mamba_d_ssm" else "mamba_expand x hidden_size"
            yield Problem(f"mamba_n_heads {heads} x mamba_d_head {head_dim} must equal {size} ({inner}) with "
                          f"mamba_n_heads divisible by mamba_n_groups {groups}",
                          evidence={"mamba_n_heads": heads, "mamba_d_head": head_dim, inner_key: inner,
                                    "mamba_n_groups": groups}, location=config_key("mamba_n_heads"))
            return
    names = ctx.weights.names
    for key, suffix, shape in conv_expectations(ctx):
        for name in (n for n in names if n.endswith(suffix)):
            got = tuple(ctx.weights.info(name).shape)
            if got != shape:
                yield Problem(f"{name} has shape {list(got)}, but config.json ({key} = {raw.get(key)!r}) "
                              f"describes {list(shape)}", evidence={"tensor": name, "shape": list(got),
                                                                    "expected": list(shape), "key": key},
                              location=config_key(key))
                return


# Granite 4 layer_types the pinned llama.cpp converter (conversion/granite.py get_attn_layers) takes for attention
CONVERTER_ATTENTION = "attention"


@check("CFG043", category="config", severity="info", needs=("config",),
       hint="Before converting to GGUF, write Granite 4's layer_types as the hub does (\"mamba\" / \"attention\"); "
            "transformers reads both spellings.")
def granite_layer_types_for_llama_cpp(ctx):
    """Granite 4's layer_types are spelled the way llama.cpp's converter recognises its attention layers.

    transformers 5 re-saves a Granite 4 config with layer_types "linear_attention" / "full_attention"; the hub
    checkpoints (and llama.cpp's convert_hf_to_gguf.py, which picks attention layers by `typ == "attention"`)
    use "mamba" / "attention". A config in the new spelling converts to a GGUF whose head_count_kv is 0 on every
    layer: llama.cpp then takes the attention layers for Mamba2 layers (missing ssm tensors, or garbage). The
    model itself is fine in transformers and here: a note for whoever converts it.
    """
    if ctx.config.architecture != "GraniteMoeHybridForCausalLM":
        raise Skip("not a Granite 4 hybrid")
    types = ctx.raw_config.get("layer_types")
    if not isinstance(types, list):
        return
    attention = [i for i, t in enumerate(types) if t in ("attention", "full_attention")]
    missed = [i for i in attention if types[i] != CONVERTER_ATTENTION]
    if missed:
        yield Problem(f"layer_types names {len(missed)} attention layer(s) \"full_attention\" (e.g. layer "
                      f"{missed[0]}): llama.cpp's converter recognises only \"attention\" and would convert them "
                      "as Mamba2 layers (head_count_kv 0)", evidence={"layers": missed[:16]},
                      location=config_key("layer_types"))
