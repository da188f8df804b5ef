"""The tensors a checkpoint must hold, with their shapes, derived from config.json (Hugging Face names) and
bounded by the tensors the files actually hold. Shared by the weights checks and `llmdoctor fix`.

The config is believed only as far as the files back it: the expected table covers the decoder layers up to
the last layer index a tensor carries (never more than declared), so a config claiming a billion layers costs
nothing; `layer_shortfall` reports the claim instead, so a hostile config
cannot make the check allocate what it declares.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterable

from checks.catalogue.registry import Skip
from reference_engine.core.model_weights import expected_shapes as engine_shapes
from reference_engine.errors import ModelDirError
from reference_engine.limits import MAX_EXPECTED_TENSORS, layers_backed

EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"
# leftovers some converters keep; harmless, the engines recompute them
HARMLESS_EXTRA = re.compile(r"(^|\.)rotary_emb\.inv_freq$|(^|\.)masked_bias$|(^|\.)attn\.bias$")
LAYER_INDEX = re.compile(r"\.layers\.(\d+)\.")


@dataclasses.dataclass(frozen=True)
class LayerShortfall:
    declared: int              # config num_hidden_layers
    backed: int                # 1 + the last layer index below `declared` that some tensor carries (0: none)

    @property
    def message(self) -> str:
        held = f"only for layers 0..{self.backed - 1}" if self.backed else "for no decoder layer at all"
        return (f"config.json declares {self.declared} decoder layers but the weights hold tensors {held}: "
                f"{self.declared - self.backed} trailing layer(s) missing")


def expected_tensors(cfg, names: Iterable[str] | None = None) -> dict[str, tuple[int, ...]]:
    """name -> shape for every tensor the model needs (the engine's own table, so checks and loader agree).

    With `names` (the tensors present) the table covers the layers up to the last one the files hold, and
    never more than MAX_EXPECTED_TENSORS entries: its size follows the checkpoint, not the config's claim.
    Layers past the last one present are `layer_shortfall`'s finding."""
    if names is None:
        return expected_shapes(cfg)
    layers = backed_layers(cfg, names)
    if layers == cfg.num_hidden_layers:
        return expected_shapes(cfg)
    return expected_shapes(dataclasses.replace(cfg, num_hidden_layers=layers))


def expected_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """The engine's table; a config whose family settings are unusable (a string expert count, an
    architecture no family runs) makes the tensor checks not apply: CFG findings report the config itself."""
    try:
        return engine_shapes(cfg)
    except ModelDirError as e:
        raise Skip(f"config.json does not describe the tensors: {e.problem}") from None


def last_layer_end(cfg, names: Iterable[str]) -> int:
    """1 + the largest layer index below the declared count that a tensor name carries; 0 when none does."""
    return layers_backed(cfg.num_hidden_layers, names)


def backed_layers(cfg, names: Iterable[str]) -> int:
    """Decoder layers to expect: up to the last one present (never past the declared count), capped so the
    table stays within MAX_EXPECTED_TENSORS (a MoE config may declare thousands of tensors per layer)."""
    layers = last_layer_end(cfg, names)
    if layers == 0:
        return 0
    base = len(expected_shapes(dataclasses.replace(cfg, num_hidden_layers=0)))
    per_layer = max(len(expected_shapes(dataclasses.replace(cfg, num_hidden_layers=1))) - base, 1)
    return min(layers, max(MAX_EXPECTED_TENSORS // per_layer, 1))


def layer_shortfall(cfg, names: Iterable[str]) -> LayerShortfall | None:
    """The config's layer count versus the last layer index the tensors carry; None when the last declared
    layer is present (holes before it are missing tensors). Computed from the names present, never by
    enumerating the declared layers."""
    backed = last_layer_end(cfg, names)
    return LayerShortfall(cfg.num_hidden_layers, backed) if backed < cfg.num_hidden_layers else None


def optional_tensors(cfg) -> set[str]:
    """Tensors a checkpoint may hold without needing them: the lm_head copy of a tied model."""
    return {LM_HEAD} if cfg.tie_word_embeddings else set()


def role_of(name: str) -> str:
    """A tensor's role with the layer index removed: 'model.layers.*.mlp.up_proj.weight'."""
    return LAYER_INDEX.sub(".layers.*.", name)


def output_rows_name(cfg, weights=None) -> str:
    """The tensor whose rows produce logits: lm_head, or the embedding when tied (a stored lm_head copy is
    then ignored by transformers, which ties the two after loading). With `weights`, found by role."""
    if weights is None:
        return EMBED if cfg.tie_word_embeddings else LM_HEAD
    embed = embed_name(weights) or EMBED
    return embed if cfg.tie_word_embeddings else (lm_head_name(weights) or LM_HEAD)


# ---- tensors by role, for any causal decoder (names differ by family) ---------------------------------------
# the input embedding and LM head under the names the common Hugging Face classes give them: Llama-style,
# multimodal wrappers (Gemma 3, LLaVA), GPT-2/BLOOM/Falcon, GPT-NeoX, OPT, ChatGLM, raw Meta checkpoints
EMBED_NAMES = (EMBED, "model.language_model.embed_tokens.weight", "language_model.model.embed_tokens.weight",
               "transformer.wte.weight", "transformer.word_embeddings.weight", "gpt_neox.embed_in.weight",
               "model.decoder.embed_tokens.weight", "transformer.embedding.word_embeddings.weight",
               "model.embed_in.weight", "tok_embeddings.weight", "embed_tokens.weight", "wte.weight")
EMBED_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight",
                  "tok_embeddings.weight")
LM_HEAD_NAMES = (LM_HEAD, "language_model.lm_head.weight", "model.lm_head.weight", "embed_out.weight",
                 "output.weight", "transformer.output_layer.weight")


def embed_name(weights) -> str | None:
    """The input-embedding tensor of any decoder checkpoint (a known name, else a 2-D tensor named like
    one); None when there is none."""
    for name in EMBED_NAMES:
        if name in weights:
            return name
    found = [n for n in weights.names if n.endswith(EMBED_SUFFIXES) and len(weights.info(n).shape) == 2]
    return min(found, key=len) if found else None


def lm_head_name(weights) -> str | None:
    """The stored LM-head tensor (None when the checkpoint has none, as a tied model usually has not)."""
    return next((name for name in LM_HEAD_NAMES if name in weights), None)


def tensor_table_known(cfg) -> bool:
    """Whether the expected tensor table exists for this architecture (the engine families define it);
    for any other decoder the name/shape checks skip and the role-based checks still run."""
    from reference_engine.core.families import is_supported
    return is_supported(cfg.architecture)
