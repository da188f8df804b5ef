"""CFG060-CFG064: the long-context settings of config.json (or of a GGUF's metadata), read once (declared.py)."""
from __future__ import annotations

from checks.long_context.declared import (layer_problems, scaling_problems, settings, unscaled_claim,
                                          window_problems)
from checks.long_context.trained_length import length_evidence, sources_read
from checks.catalogue.inputs import ResourceError
from checks.catalogue.registry import Problem, check
from checks.catalogue.locations import config_key
from reference_engine.architectures import HYBRIDS
from reference_engine.core.families import settings as family_settings
from reference_engine.errors import ModelDirError



def _settings(ctx):
    return settings(ctx.raw_config)


@check("CFG060", category="config", severity="warning", needs=("config",),
       hint="Copy the rope scaling block (type, factor, original_max_position_embeddings, factor lists) from "
            "the original checkpoint's config.json.")
def rope_scaling_consistent(ctx):
    """The rope scaling block agrees with the rest of the config (beyond CFG003's required fields).

    yarn needs the length it was trained at (original_max_position_embeddings, in the block or at the top):
    without it an engine takes max_position_embeddings as that length. longrope's factor lists need one
    factor per rotary pair (rotary_dim / 2: head_dim times partial_rotary_factor, Phi-4-mini: 48, not 64).
    A stretch of original x factor short of max_position_embeddings, or an original length past it, says the
    block and the declared length came from different models.
    """
    for message, key in scaling_problems(_settings(ctx)):
        yield Problem(message, location=config_key(key))


@check("CFG061", category="config", severity="warning", needs=("config",),
       hint="Restore the rope scaling the model was trained with, or set max_position_embeddings to the length "
            "its rope was set up for.")
def positions_without_scaling(ctx):
    """The config does not claim many times the positions its rope was set up for without any scaling.

    A config with no rope scaling whose max_position_embeddings is twice or more its own
    original_max_position_embeddings, or twice or more the longest wavelength of its rotary frequencies,
    promises positions the model never saw: an export that dropped the rope_scaling block talks gibberish
    past the trained length (unsloth#6197), and every short test still passes. The wavelength is a loose
    bound (rope_theta 10k at head_dim 64: ~47k positions), so a length past the rope base itself is weighed
    too, against the training length the files state (tokenizer_config.json model_max_length,
    generation_config.json max_length, config length keys): past the base and twice what the files say, or
    twice the base where they say nothing, is the same promise, and the finding names what it read.
    `check --context N` (CTX002) measures where it stops reading.
    """
    if no_rotary_layer(ctx):
        return
    found = length_evidence(None if ctx.is_gguf else ctx.model_dir, ctx.raw_config)
    claim = unscaled_claim(_settings(ctx), found, sources_read())
    if claim is not None:
        yield Problem(claim[0], location=config_key(claim[1]),
                      evidence={"training_length": [{"source": e.source, "tokens": e.tokens} for e in found],
                                "read": sources_read()})


def no_rotary_layer(ctx) -> bool:
    """Whether no layer rotates its positions (Granite 4's position_embedding_type "nope"): the rope settings
    then bound no length. A config the engine's families cannot read is judged on its rope settings."""
    try:
        config = ctx.config
        return len(family_settings(config).positions.nope_layers) >= config.num_hidden_layers
    except (ResourceError, ModelDirError):
        return False


@check("CFG062", category="config", severity="error", needs=("config",),
       hint="Give layer_types one entry per layer (num_hidden_layers), each a layer kind, and a sliding_window "
            "when any layer is sliding_attention.")
def layer_types_consistent(ctx):
    """layer_types has one layer kind per layer, and a window where it names sliding layers.

    transformers and the engines read each layer's attention (full, sliding, chunked, linear ...) from
    layer_types; a list of the wrong length shifts or drops kinds (a converter that trimmed layers and kept
    the list), and sliding_attention layers without a sliding_window attend to everything.
    """
    hybrid = ctx.config.architecture in HYBRIDS      # a hybrid's layer count is CFG040's: one finding, not two
    for message, key in layer_problems(_settings(ctx), counts_layers=not hybrid):
        yield Problem(message, location=config_key(key))


@check("CFG063", category="config", severity="warning", needs=("config",),
       hint="Restore the layer pattern (layer_types / sliding_window_pattern) and the per-kind rope bases of "
            "the original config.")
def window_pattern_consistent(ctx):
    """The sliding window is not on every layer of a model that lists kinds, and local rope bases are not
    above the global ones.

    A config that lists layer kinds and makes all of them sliding (Gemma 3n served with the window on every
    layer, vllm#21863) reads nothing past the window; a local (sliding) rope base above the global one is
    Gemma 3's two bases swapped. Both read short prompts well and fail far out (CTX001 measures where).
    """
    for message, key in window_problems(_settings(ctx)):
        yield Problem(message, location=config_key(key))


@check("CFG064", category="config", severity="warning", needs=("config",),
       hint="Serve without the yarn block while prompts stay under original_max_position_embeddings; add it (and "
            "the factor) only for the lengths that need it, sized to them.")
def static_yarn_on_short_prompts(ctx):
    """No yarn rope factor added on top of a model's own length: engines apply it to every prompt.

    transformers, vLLM, SGLang and llama.cpp apply YaRN statically: once the block is in config.json (or a
    GGUF's rope.scaling.*), every position is read stretched, and a model that was trained at its original
    length without it reads short prompts worse (Qwen3's model cards: "static YaRN ... may impact performance
    on shorter texts"; add it only when prompts pass the original length). A block added on top of a model's
    own length (max_position_embeddings below original x factor: Qwen3's recipe) is a warning naming the
    factor; a model whose declared length is the stretch itself (DeepSeek-V3: 4096 x 40) was trained with it
    and passes.
    """
    s = _settings(ctx)
    block = s.rope.get("full_attention", {})
    factor, original = block.get("factor"), s.original
    if block.get("rope_type") != "yarn" or not isinstance(factor, (int, float)) or factor <= 1:
        return
    stretch = original * factor if original else None
    if stretch and s.declared and s.declared >= 0.99 * stretch:
        return                                  # declared at the stretch: trained with it
    said = f" (original {original} positions, stretched to {stretch:.0f})" if stretch else ""
    yield Problem(f"yarn rope factor {factor:g} is static{said}: every prompt, short ones too, is read stretched "
                  f"{factor:g}x; below {original or 'the original length'} tokens the model reads worse than "
                  "without the block", location=config_key(f"{s.rope_key}.factor"),
                  evidence={"factor": factor, "original_max_position_embeddings": original,
                            "max_position_embeddings": s.declared})
