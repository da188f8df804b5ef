"""Config checks for the fields of the NoPE, chunked and windowed families (CFG030-CFG035): SmolLM3 and Llama 4's
`no_rope_layers`, Llama 4's chunked attention, interleaved MoE and attention temperature, MiniMax-M2's routing and
partial rotary, OLMo 3 / SmolLM3 `layer_types`. Each reads config.json only and names the field it finds wrong; a
field the engine would refuse is an error (it fails to load, or loads into another model), one that transformers
ignores is a warning.
"""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key
from reference_engine.architectures import NOPE_FAMILIES, WINDOW_FAMILIES




def _only(ctx, architectures) -> tuple[dict, int]:
    """(config.json fields, num_hidden_layers) of a model of one of `architectures`, else Skip."""
    cfg = ctx.config
    if cfg.architecture not in architectures:
        raise Skip(f"not a {' / '.join(architectures)} model")
    return cfg.raw, cfg.num_hidden_layers


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bad_int(raw: dict, key: str, minimum: int, optional: bool = True) -> Problem | None:
    """A finding when raw[key] is present (or required) and not an integer >= minimum."""
    value = raw.get(key)
    if value is None and optional:
        return None
    if not _is_int(value) or value < minimum:
        return Problem(f"'{key}' must be an integer >= {minimum}{' or null' if optional else ''}, found {value!r}",
                       evidence={key: value}, location=config_key(key))
    return None


@check("CFG030", category="config", severity="error", needs=("config",),
       hint="Give no_rope_layers one 0/1 entry per layer (1 = RoPE, 0 = NoPE), as the original config has it.")
def no_rope_layers_fit(ctx):
    """`no_rope_layers` (SmolLM3, Llama 4) lists 0 or 1 for every decoder layer.

    Entry i says whether layer i rotates its queries and keys (1) or is a NoPE layer (0) that sees position only
    through the causal mask. A list shorter than `num_hidden_layers` makes transformers fail with an IndexError
    while building the model (and another engine guess); entries other than 0/1, or a list that is not a list,
    run a different model; a longer list loads, its tail ignored (often a config copied from a deeper model).
    Without the field, one layer in `no_rope_layer_interval` (default 4) is NoPE, so that must be positive.

    Remedy: restore the list from the original checkpoint's config.json.
    """
    raw, n = _only(ctx, NOPE_FAMILIES)
    flags = raw.get("no_rope_layers")
    if not flags:
        bad = _bad_int(raw, "no_rope_layer_interval", 1)
        if bad:
            yield bad
        return
    ev = {"no_rope_layers": str(flags)[:120], "num_hidden_layers": n}
    if not isinstance(flags, list) or any(not _is_int(v) or v not in (0, 1) for v in flags):
        yield Problem("'no_rope_layers' must be a list of 0 (NoPE) and 1 (RoPE) entries, found "
                      f"{str(flags)[:60]}", evidence=ev, location=config_key("no_rope_layers"))
    elif len(flags) < n:
        yield Problem(f"'no_rope_layers' has {len(flags)} entries for {n} layers: layers {len(flags)}.. have no "
                      f"RoPE/NoPE setting (transformers fails to build the model)", evidence=ev,
                      location=config_key("no_rope_layers"))
    elif len(flags) > n:
        yield Problem(f"'no_rope_layers' has {len(flags)} entries for {n} layers: the last {len(flags) - n} are "
                      f"ignored", evidence=ev, severity="warning", location=config_key("no_rope_layers"))


@check("CFG031", category="config", severity="error", needs=("config",),
       hint="Set attention_chunk_size to a positive integer (or null for full attention) and layer_types to one "
            "known kind per layer.")
def attention_layout_fits(ctx):
    """Llama 4's `attention_chunk_size` and the `layer_types` of Llama 4, OLMo 3 and SmolLM3 describe every layer.

    With a chunk size, Llama 4's RoPE layers attend only within their chunk of positions; 0, a negative or a
    non-integer value leaves no chunk to attend in. `layer_types` must list one kind per layer, each a kind the
    family knows ("sliding_attention"/"full_attention"; Llama 4: "chunked_attention"/"full_attention"): a wrong
    length is ignored by this engine and by transformers' older code but indexes past the end in newer code, and
    an unknown kind silently becomes full attention. Sliding layers need a `sliding_window`.

    Remedy: restore the fields from the original config.json.
    """
    raw, n = _only(ctx, tuple(WINDOW_FAMILIES))
    if ctx.config.architecture == "Llama4ForCausalLM":
        bad = _bad_int(raw, "attention_chunk_size", 1)
        if bad:
            yield bad
    types = raw.get("layer_types")
    if types is None:
        return
    kinds = WINDOW_FAMILIES[ctx.config.architecture]
    ev = {"layer_types": str(types)[:120], "num_hidden_layers": n}
    if not isinstance(types, list) or len(types) != n:
        count = len(types) if isinstance(types, list) else type(types).__name__
        yield Problem(f"'layer_types' must list one kind per layer: {count} for {n} layers", evidence=ev,
                      location=config_key("layer_types"))
        return
    unknown = sorted({str(t) for t in types} - set(kinds))
    if unknown:
        yield Problem(f"'layer_types' has unknown kind {unknown[0]!r} (known: {', '.join(kinds)})", evidence=ev,
                      location=config_key("layer_types"))
    if "sliding_attention" in types and not raw.get("sliding_window"):
        yield Problem("'layer_types' lists sliding_attention layers but 'sliding_window' is not set: they run "
                      "full attention", evidence=ev, severity="warning", location=config_key("sliding_window"))


@check("CFG032", category="config", severity="error", needs=("config",),
       hint="Restore interleave_moe_layer_step / moe_layers, num_local_experts, num_experts_per_tok and "
            "intermediate_size_mlp from the original config.json.")
def llama4_moe_layout_fits(ctx):
    """Llama 4's interleaved MoE: which layers are sparse, how many experts, how many per token.

    `moe_layers` (or every `interleave_moe_layer_step`-th layer) run the router, the experts and the shared
    expert; the others a dense MLP of `intermediate_size_mlp`. A step of 0 divides by zero, a step above the
    layer count leaves no MoE layer although the weights hold experts, `moe_layers` past the last layer are
    ignored, and `num_experts_per_tok` must be between 1 and `num_local_experts`.

    Remedy: restore the fields from the original config.json.
    """
    raw, n = _only(ctx, ("Llama4ForCausalLM",))
    for key, minimum in (("interleave_moe_layer_step", 1), ("num_local_experts", 1), ("num_experts_per_tok", 1),
                         ("intermediate_size_mlp", 1)):
        bad = _bad_int(raw, key, minimum)
        if bad:
            yield bad
            return
    listed, step = raw.get("moe_layers"), raw.get("interleave_moe_layer_step", 1)
    if listed is not None:
        if not isinstance(listed, list) or any(not _is_int(i) or not 0 <= i < n for i in listed):
            yield Problem(f"'moe_layers' must list layer indices 0..{n - 1}, found {str(listed)[:60]}",
                          evidence={"moe_layers": str(listed)[:120], "num_hidden_layers": n},
                          location=config_key("moe_layers"))
    elif step > n:
        yield Problem(f"'interleave_moe_layer_step' {step} exceeds the {n} layers: no layer runs the experts",
                      evidence={"interleave_moe_layer_step": step, "num_hidden_layers": n}, severity="warning",
                      location=config_key("interleave_moe_layer_step"))
    experts, top_k = raw.get("num_local_experts", 16), raw.get("num_experts_per_tok", 1)
    if top_k > experts:
        yield Problem(f"'num_experts_per_tok' {top_k} exceeds 'num_local_experts' {experts}",
                      evidence={"num_experts_per_tok": top_k, "num_local_experts": experts},
                      location=config_key("num_experts_per_tok"))


@check("CFG033", category="config", severity="error", needs=("config",),
       hint="Set floor_scale to a positive number and attn_scale to a number (Llama 4: 8192 and 0.1), and "
            "attn_temperature_tuning / use_qk_norm to true or false.")
def llama4_attention_fields_fit(ctx):
    """Llama 4's attention temperature tuning and q/k norm fields have usable values.

    On NoPE layers the queries are scaled by 1 + attn_scale * log1p(floor((pos + 1) / floor_scale)):
    a `floor_scale` of 0 divides by zero (inf/NaN queries), a non-number fails at load. `attn_temperature_tuning`
    and `use_qk_norm` are switches; a string such as "false" is truthy and turns the feature on.

    Remedy: restore the fields from the original config.json.
    """
    raw, _ = _only(ctx, ("Llama4ForCausalLM",))
    floor, scale = raw.get("floor_scale", 8192), raw.get("attn_scale", 0.1)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or floor <= 0:
        yield Problem(f"'floor_scale' must be a positive number, found {floor!r}", evidence={"floor_scale": floor},
                      location=config_key("floor_scale"))
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        yield Problem(f"'attn_scale' must be a number, found {scale!r}", evidence={"attn_scale": scale},
                      location=config_key("attn_scale"))
    for key in ("attn_temperature_tuning", "use_qk_norm"):
        if key in raw and not isinstance(raw[key], bool):
            yield Problem(f"'{key}' must be true or false, found {raw[key]!r}", evidence={key: raw[key]},
                          location=config_key(key))


@check("CFG034", category="config", severity="error", needs=("config",),
       hint="Check the MiniMax-M2 config against the original: sigmoid routing with a correction bias, no shared "
            "experts, no sliding window, rotary_dim an even number up to head_dim.")
def minimax_fields_fit(ctx):
    """MiniMax-M2's config fields agree with the model transformers (and this engine) runs.

    The released config carries fields no implementation reads: `scoring_func` (the router is always sigmoid
    with `e_score_correction_bias`), `shared_intermediate_size` (no shared expert is built), `sliding_window`
    and `attn_type_list` (every layer attends fully). A config that sets them otherwise describes a model these
    engines do not run: a warning. `rotary_dim` (the rotating part of each head) must be an even number up to
    `head_dim`; otherwise RoPE cannot be built (error).

    Remedy: compare with the original config.json; a fine-tune that really changed routing or attention needs
    an engine that implements it.
    """
    raw, _ = _only(ctx, ("MiniMaxM2ForCausalLM",))
    head_dim, rot = ctx.config.head_dim, raw.get("rotary_dim")
    if rot is not None and (not _is_int(rot) or rot < 2 or rot % 2 or rot > head_dim):
        yield Problem(f"'rotary_dim' must be an even integer in 2..head_dim ({head_dim}), found {rot!r}",
                      evidence={"rotary_dim": rot, "head_dim": head_dim}, severity="error",
                      location=config_key("rotary_dim"))
    if raw.get("scoring_func", "sigmoid") != "sigmoid":
        yield Problem(f"'scoring_func' is {raw['scoring_func']!r}: MiniMax-M2 routes with sigmoid scores (the "
                      f"field is not read)", evidence={"scoring_func": raw["scoring_func"]},
                      severity="warning", location=config_key("scoring_func"))
    shared = raw.get("shared_intermediate_size")
    if _is_int(shared) and shared > 0:
        yield Problem(f"'shared_intermediate_size' is {shared}: MiniMax-M2 runs no shared expert (the field is "
                      f"not read; any shared-expert weights are unexpected tensors)",
                      evidence={"shared_intermediate_size": shared}, severity="warning",
                      location=config_key("shared_intermediate_size"))
    if raw.get("sliding_window"):
        yield Problem(f"'sliding_window' is {raw['sliding_window']}: MiniMax-M2 attends over the whole context on "
                      f"every layer (the field is not read)", evidence={"sliding_window": raw["sliding_window"]},
                      severity="warning", location=config_key("sliding_window"))
