"""Gated DeltaNet config checks (CFG050-CFG053): Qwen3-Next / Qwen3.5 linear-attention layers, whose decay
parameters, conv window and layer kinds the config and the tensors must agree on.

Each linear-attention layer keeps a recurrent state per sequence, multiplied every token by
exp(g) = exp(-exp(A_log) * softplus(a + dt_bias)) (in (0, 1) for any finite A_log and dt_bias) and fed by a
depthwise conv of `linear_conv_kernel_dim` taps over q|k|v. A NaN there poisons the state of every sequence
for good; a mismatched kernel or head count is a reshape crash or a state of the wrong size; a `layer_types`
that disagrees with `full_attention_interval` puts attention where another engine puts DeltaNet.
"""
from __future__ import annotations

import re

import torch

from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key, tensor
from reference_engine.core.families.hybrid.qwen3_next import ARCHITECTURES, KINDS, dims
from reference_engine.errors import ModelDirError

LINEAR = re.compile(r"^model\.layers\.(\d+)\.linear_attn\.")
# exp(g) at a = 0 below this wipes the state every token; rounding to 1.0 in float32 never forgets
MIN_DECAY = 1e-12


def _need_delta_net(cfg) -> None:
    if cfg.architecture not in ARCHITECTURES:
        raise Skip("no Gated DeltaNet layers (not a Qwen3-Next / Qwen3.5 model)")




def _linear_layers(names) -> list[int]:
    return sorted({int(m.group(1)) for n in names if (m := LINEAR.match(n))})


def _decay_tensors(ctx):
    """(layer, A_log name, A_log float32, dt_bias name, dt_bias float32) per linear-attention layer present."""
    names = set(ctx.weights.names)
    for i in _linear_layers(names):
        a, dt = f"model.layers.{i}.linear_attn.A_log", f"model.layers.{i}.linear_attn.dt_bias"
        if a in names and dt in names:
            yield i, a, ctx.weights.get(a).float(), dt, ctx.weights.get(dt).float()


@check("CFG050", category="config", severity="error", needs=("config", "weights"),
       hint="Re-export the linear_attn.A_log and dt_bias tensors from the original checkpoint.")
def delta_net_decay_finite(ctx):
    """Every Gated DeltaNet layer's A_log and dt_bias are finite.

    The decay g = -exp(A_log) * softplus(a + dt_bias) multiplies the recurrent state at every token. One
    NaN or Inf in A_log or dt_bias makes that head's state NaN at the first token, and a recurrent state
    never recovers: every later token of every sequence reads it. (A model loaded in float16 overflows
    exp(A_log) the same way; transformers computes it in float32.)

    Remedy: restore the tensors from the original checkpoint.
    """
    _need_delta_net(ctx.config)
    for layer, a_name, a, dt_name, dt in _decay_tensors(ctx):
        for name, t in ((a_name, a), (dt_name, dt)):
            bad = (~torch.isfinite(t)).nonzero().flatten().tolist()
            if bad:
                yield Problem(f"layer {layer}: {name} has {len(bad)} non-finite value(s) (heads {bad[:8]}): "
                              f"that head's recurrent state is NaN from the first token",
                              evidence={"tensor": name, "heads": bad[:16]}, location=tensor(name))


@check("CFG051", category="config", severity="warning", needs=("config", "weights"),
       hint="Check the A_log / dt_bias conversion (A_log is log(A), not A = -exp(A_log); dt_bias is added "
            "before the softplus).")
def delta_net_decay_range(ctx):
    """Each Gated DeltaNet head's decay is strictly between 0 and 1 (it forgets, but not everything at once).

    At a = 0 a head keeps exp(-exp(A_log) * softplus(dt_bias)) of its state per token. A decay that
    underflows to 0 (A_log very large, e.g. A stored where log(A) belongs) wipes the memory at every token:
    the layer degenerates to a per-token map. A decay that rounds to exactly 1 in float32 (A_log very
    negative, e.g. -exp(A_log) written back into A_log, or dt_bias far below 0) never forgets: the state
    sums the whole context and its scale drifts with length. Both load and run without an error.

    Remedy: recompute A_log and dt_bias from the original checkpoint.
    """
    _need_delta_net(ctx.config)
    for layer, a_name, a, dt_name, dt in _decay_tensors(ctx):
        if a.shape != dt.shape or not (torch.isfinite(a).all() and torch.isfinite(dt).all()):
            continue                                     # CFG053 / CFG050 report these
        decay = torch.exp(-torch.exp(a.double()) * torch.nn.functional.softplus(dt.double()))
        wiped = (decay < MIN_DECAY).nonzero().flatten().tolist()
        frozen = (decay.float() >= 1.0).nonzero().flatten().tolist()
        for heads, what in ((wiped, "decays to 0: the head forgets everything at every token"),
                            (frozen, "rounds to 1 in float32: the head never forgets")):
            if heads:
                h = heads[0]
                yield Problem(f"layer {layer}: the decay of {len(heads)} head(s) {what} (head {h}: A_log "
                              f"{a[h].item():.4g}, dt_bias {dt[h].item():.4g})",
                              evidence={"tensor": a_name, "heads": heads[:16],
                                        "decay": [float(decay[i]) for i in heads[:16]]}, location=tensor(a_name))


def _layer_types_problems(raw: dict, n: int):
    types, interval = raw.get("layer_types"), raw.get("full_attention_interval")
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int) or interval < 1):
        yield Problem(f"full_attention_interval must be a positive integer, found {interval!r}",
                      location=config_key("full_attention_interval"))
        interval = None
    if types is None:
        return
    if not isinstance(types, list) or len(types) != n:
        count = len(types) if isinstance(types, list) else repr(types)
        yield Problem(f"layer_types lists {count} layer kinds for {n} layers (num_hidden_layers)",
                      evidence={"num_hidden_layers": n}, location=config_key("layer_types"))
        return
    unknown = sorted({str(t) for t in types} - set(KINDS))
    if unknown:
        yield Problem(f"layer_types holds {unknown[0]!r}: only {' and '.join(KINDS)} exist in this family",
                      evidence={"unknown": unknown}, location=config_key("layer_types"))
        return
    if interval is not None:
        implied = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
        differ = [i for i in range(n) if implied[i] != types[i]]
        if differ:
            yield Problem(f"layer_types and full_attention_interval {interval} disagree on {len(differ)} layer(s) "
                          f"(first: layer {differ[0]} is {types[differ[0]]}): transformers reads layer_types, "
                          f"a reader that knows only the interval runs another model", severity="warning",
                          evidence={"layers": differ[:16], "full_attention_interval": interval},
                          location=config_key("layer_types"))


@check("CFG052", category="config", severity="error", needs=("config",),
       hint="Give layer_types one entry per layer (linear_attention or full_attention), matching "
            "full_attention_interval when both are present.")
def delta_net_layer_types(ctx):
    """layer_types names a known kind for every layer and agrees with full_attention_interval.

    Qwen3-Next / Qwen3.5 decide per layer between Gated DeltaNet ("linear_attention") and full attention
    from `layer_types`, or, when it is absent, from `full_attention_interval` (every n-th layer attends).
    A list shorter or longer than `num_hidden_layers` (layers added or pruned without updating it), an
    unknown kind, or a list that contradicts the interval (transformers reads the list; llama.cpp's
    converter writes both, as per-layer flags and as `full_attention_interval`, and a reader that knows only
    the interval follows it) gives a model whose layers run the wrong mixer over their weights, or a crash
    at load.

    Remedy: regenerate layer_types from the original config (or drop it and keep the interval).
    """
    _need_delta_net(ctx.config)
    yield from _layer_types_problems(ctx.raw_config, ctx.config.num_hidden_layers)


@check("CFG053", category="config", severity="error", needs=("config", "weights"),
       hint="Restore linear_conv_kernel_dim and the linear_* head counts/dims the checkpoint was trained with.")
def delta_net_sizes(ctx):
    """The DeltaNet conv weights and state tensors have the sizes the config's linear_* numbers give.

    The conv has 2 * linear_num_key_heads * linear_key_head_dim + linear_num_value_heads *
    linear_value_head_dim channels and linear_conv_kernel_dim taps; A_log and dt_bias hold one value per
    value head, the gated norm one weight per value dimension; value heads come in whole groups per key
    head. The per-sequence state is sized from the config (conv window [channels, taps - 1], recurrent
    state [value heads, key dim, value dim]); when the tensors disagree, an engine crashes in a reshape or
    keeps a state of the wrong size.

    Remedy: restore the config numbers (or the tensors) from the original checkpoint.
    """
    cfg = ctx.config
    _need_delta_net(cfg)
    try:
        d = dims(cfg)
    except ModelDirError as e:
        yield Problem(f"the DeltaNet sizes cannot be read: {e.problem}", location=config_key("linear_num_key_heads"))
        return
    if d.v_heads % d.k_heads:
        yield Problem(f"linear_num_value_heads {d.v_heads} is not a multiple of linear_num_key_heads {d.k_heads}",
                      location=config_key("linear_num_value_heads"))
    names = set(ctx.weights.names)
    for layer in _linear_layers(names):
        p = f"model.layers.{layer}.linear_attn."
        want = {p + "conv1d.weight": (d.conv_dim, 1, d.kernel), p + "A_log": (d.v_heads,),
                p + "dt_bias": (d.v_heads,), p + "norm.weight": (d.v_dim,)}
        for name, shape in want.items():
            if name not in names:
                continue
            got = tuple(ctx.weights.info(name).shape)
            if got != shape:
                yield Problem(f"layer {layer}: {name} has shape {list(got)}, the config gives {list(shape)}"
                              f"{_blame(name, got, shape)}", evidence={"tensor": name, "shape": list(got),
                                                                      "expected": list(shape)},
                              location=config_key(_blame_key(name, got, shape)))


def _blame_key(name: str, got: tuple, want: tuple) -> str:
    """The config key a mismatch points at: the kernel for a conv with the right channels, else the sizes."""
    if name.endswith("conv1d.weight"):
        same_channels = len(got) == 3 and got[0] == want[0]
        return "linear_conv_kernel_dim" if same_channels else "linear_num_key_heads"
    return "linear_value_head_dim" if name.endswith("norm.weight") else "linear_num_value_heads"


def _blame(name: str, got: tuple, want: tuple) -> str:
    if _blame_key(name, got, want) == "linear_conv_kernel_dim":
        return f" (the weights hold {got[2]} taps, linear_conv_kernel_dim says {want[2]})"
    return " (check the linear_* head counts and head dims)"
