"""Falcon-H1's config (CFG044-CFG046): its muP multipliers, the switches that add or drop tensors, and what
llama.cpp's converter makes of it. Each layer runs attention and a Mamba2 mixer side by side, every branch
scaled by a multiplier from config.json (core/families/hybrid/falcon_h1.py); the Mamba2 sizes themselves are CFG042's
(hybrid_config.py). Reads config.json and the tensor names; no engine."""
from __future__ import annotations

import math

from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key

FALCON_H1 = "FalconH1ForCausalLM"
# multiplier -> what it scales (what a 0 silences)
SCALARS = {"embedding_multiplier": "the token embeddings", "lm_head_multiplier": "the logits",
           "key_multiplier": "the attention keys (every score)", "attention_in_multiplier": "attention's input",
           "attention_out_multiplier": "the attention branch", "ssm_in_multiplier": "the Mamba2 mixer's input",
           "ssm_out_multiplier": "the Mamba2 branch"}
LISTS = {"ssm_multipliers": ("in_proj's z (the gate)", "in_proj's x", "in_proj's B", "in_proj's C",
                             "in_proj's dt (the step size no longer depends on the input)"),
         "mlp_multipliers": ("the MLP's gate", "the MLP's output")}
# config switch -> (tensor suffix it adds, what the tensor is)
SWITCHES = {"mamba_rms_norm": (".mamba.norm.weight", "the Mamba2 output norm"),
            "projectors_bias": (".mamba.out_proj.bias", "the Mamba2 out_proj bias"),
            "mamba_proj_bias": (".mamba.in_proj.bias", "the Mamba2 in_proj bias"),
            "mamba_conv_bias": (".mamba.conv1d.bias", "the Mamba2 conv bias"),
            "attention_bias": (".self_attn.q_proj.bias", "the attention biases"),
            "mlp_bias": (".feed_forward.gate_proj.bias", "the MLP biases")}
# FalconH1Config's values when config.json leaves a switch out
SWITCH_DEFAULTS = {"mamba_rms_norm": False, "projectors_bias": False, "mamba_proj_bias": False,
                   "mamba_conv_bias": True, "attention_bias": False, "mlp_bias": False}



def falcon_h1(ctx) -> dict:
    if ctx.config.architecture != FALCON_H1:
        raise Skip("not a Falcon-H1 model")
    return ctx.raw_config


def multiplier_entries(raw: dict):
    """(key, index | None, value, what it scales) of every multiplier config.json sets; a list of the wrong
    shape is (key, None, the list, None)."""
    for key, what in SCALARS.items():
        if key in raw:
            yield key, None, raw[key], what
    for key, parts in LISTS.items():
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or len(value) != len(parts):
            yield key, None, value, None
            continue
        yield from ((key, i, v, part) for i, (v, part) in enumerate(zip(value, parts)))


@check("CFG044", category="config", severity="error", needs=("config",),
       hint="Restore the muP multipliers of the original config.json (finite, positive; ssm_multipliers lists 5 "
            "numbers for z, x, B, C, dt; mlp_multipliers 2 for gate and down).")
def falcon_h1_multipliers(ctx):
    """Falcon-H1's muP multipliers are finite positive numbers, the lists of the length the model splits.

    Falcon-H1 multiplies its embeddings, logits, attention keys, each branch's input and output, the five
    segments of the Mamba2 in_proj (z, x, B, C, dt: `ssm_multipliers`) and the MLP's gate and output
    (`mlp_multipliers`) by numbers from config.json; the weights were trained under them. A multiplier of 0
    silences what it scales (the attention or Mamba2 branch drops out, every logit is 0), a non-finite one
    makes every output NaN, a list of the wrong length fails to load (or, in a converter that folds the
    multipliers into the weights, scales the wrong rows). A negative multiplier flips the sign of a branch
    no muP recipe produces: a warning.
    """
    raw = falcon_h1(ctx)
    for key, index, value, what in multiplier_entries(raw):
        name = key if index is None else f"{key}[{index}]"
        if what is None:
            parts = ", ".join(p.split(" (")[0] for p in LISTS[key])
            yield Problem(f"{key} must list {len(LISTS[key])} numbers ({parts}), found {str(value)[:60]}",
                          evidence={"key": key, "value": value}, location=config_key(key))
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            yield Problem(f"{name} is {value!r}, not a finite number: {what} becomes NaN or fails to load",
                          evidence={"key": name, "value": value}, location=config_key(key))
        elif value == 0:
            yield Problem(f"{name} is 0: {what} is multiplied by zero", evidence={"key": name, "value": value},
                          location=config_key(key))
        elif value < 0:
            yield Problem(f"{name} is negative ({value}): {what} has its sign flipped", severity="warning",
                          evidence={"key": name, "value": value}, location=config_key(key))


@check("CFG045", category="config", severity="error", needs=("config", "weights"),
       hint="Set the switch as the checkpoint was trained: true when its tensors are stored, false when they "
            "are not (mamba_rms_norm, projectors_bias, mamba_proj_bias, mamba_conv_bias, attention_bias, mlp_bias).")
def falcon_h1_switches_match_tensors(ctx):
    """Falcon-H1's switches that add tensors (output norm, biases) agree with the tensors stored.

    `mamba_rms_norm` decides whether the Mamba2 output is normed (mamba.norm.weight), `projectors_bias`,
    `mamba_proj_bias`, `mamba_conv_bias`, `attention_bias` and `mlp_bias` whether the projections add a bias.
    A switch set false over stored tensors makes transformers drop the trained values with a warning (the model
    runs without its norm or biases and talks nonsense); set true with nothing stored, it initialises them
    afresh (ones, zeros, random). A finding names the switch and one tensor.
    """
    raw = falcon_h1(ctx)
    names = ctx.weights.names
    for switch, (suffix, what) in SWITCHES.items():
        on = bool(raw.get(switch, SWITCH_DEFAULTS[switch]))
        stored = [n for n in names if n.endswith(suffix)]
        if on and not stored:
            yield Problem(f"{switch} is true but no {what} is stored (no *{suffix}): loaders initialise it afresh",
                          evidence={"switch": switch, "suffix": suffix}, location=config_key(switch))
        elif stored and not on:
            yield Problem(f"{switch} is false but {len(stored)} {what} tensor(s) are stored (e.g. {stored[0]}): "
                          "loaders drop the trained values", evidence={"switch": switch, "tensors": stored[:4]},
                          location=config_key(switch))


def _multiplier(raw: dict, key: str) -> float:
    value = raw.get(key, 1.0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0


def converter_hazards(raw: dict) -> list[tuple[str, str]]:
    """(config key, what happens) for each thing the pinned llama.cpp (conversion/falcon_h1.py,
    models/falcon-h1.cpp, models/mamba-base.cpp) does not carry over, each seen on a tiny converted model against
    llama-cpp-python of the same pin (docs/families.md; the norm: tests/reference_engine/core/
    test_family_falcon_h1_gguf.py)."""
    out = []
    if raw.get("mamba_rms_norm", False) and raw.get("mamba_norm_before_gate", True):
        out.append(("mamba_norm_before_gate", "mamba_rms_norm with mamba_norm_before_gate (true when absent): the "
                    "GGUF keeps no such flag and llama.cpp norms the Mamba2 output after the gate, another model"))
    emb, head = _multiplier(raw, "embedding_multiplier"), _multiplier(raw, "lm_head_multiplier")
    if raw.get("tie_word_embeddings", False) and emb != head:
        out.append(("tie_word_embeddings", f"tied embeddings with embedding_multiplier {emb:g} != lm_head_multiplier "
                    f"{head:g}: the converter folds embedding_multiplier into token_embd, which llama.cpp also "
                    "uses as the output head"))
    if raw.get("attention_bias", False):
        out.append(("attention_bias", "attention_bias: the converter scales the q/k/v biases by "
                    "attention_in_multiplier (k also by key_multiplier) as if they were weights, and llama.cpp's "
                    "falcon-h1 graph drops o_proj's bias"))
    if raw.get("mamba_proj_bias", False):
        out.append(("mamba_proj_bias", "mamba_proj_bias: the converter fails on the 1-D in_proj bias (IndexError)"))
    if not isinstance(raw.get("head_dim"), int):
        out.append(("head_dim", "no head_dim in config.json: the converter fails (KeyError 'head_dim'); write "
                    "hidden_size / num_attention_heads"))
    return out


@check("CFG046", category="config", severity="info", needs=("config",),
       hint="Before converting to GGUF, or serving the GGUF with llama.cpp: compare its logits with the original "
            "(`llmdoctor diff model/ model.gguf`); for a tied head, untie it (lm_head = the embedding) first.")
def falcon_h1_for_llama_cpp(ctx):
    """This Falcon-H1 config converts (with llama.cpp's pinned converter) to a GGUF that computes the same model.

    llama.cpp's converter folds Falcon-H1's multipliers into the weights and its runtime implements one form of
    the layer. Some configs fall outside it: a Mamba2 output normed before the gate (llama.cpp norms after it),
    tied embeddings with different embedding and lm_head multipliers (the folded embedding becomes the head),
    attention biases (scaled like weights; o_proj's bias dropped), an in_proj bias or a missing head_dim (the
    converter fails). The checkpoint itself is fine in transformers and here: a note for whoever converts it.
    """
    raw = falcon_h1(ctx)
    for key, hazard in converter_hazards(raw):
        yield Problem(f"llama.cpp's converter: {hazard}", evidence={"key": key}, location=config_key(key))
