"""The tensors a Llama/Mistral/Qwen2/Qwen3 checkpoint must hold, with their shapes, derived from config.json
alone (Hugging Face names). Shared by the weights checks and `llmdoctor fix`."""
from __future__ import annotations

import re

from reference_engine.core.model_weights import expected_shapes

EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"
# leftovers some converters keep; harmless, the engines recompute them
HARMLESS_EXTRA = re.compile(r"(^|\.)rotary_emb\.inv_freq$|(^|\.)masked_bias$|(^|\.)attn\.bias$")
LAYER_INDEX = re.compile(r"\.layers\.(\d+)\.")


def expected_tensors(cfg) -> dict[str, tuple[int, ...]]:
    """name -> shape for every tensor the model needs (the engine's own table, so checks and loader agree)."""
    return expected_shapes(cfg)


def optional_tensors(cfg) -> set[str]:
    """Tensors a checkpoint may hold without needing them: the lm_head copy of a tied model."""
    return {LM_HEAD} if cfg.tie_word_embeddings else set()


def role_of(name: str) -> str:
    """A tensor's role with the layer index removed: 'model.layers.*.mlp.up_proj.weight'."""
    return LAYER_INDEX.sub(".layers.*.", name)


def output_rows_name(cfg) -> str:
    """The tensor whose rows produce logits: lm_head, or the embedding when tied (a stored lm_head copy is
    then ignored by transformers, which ties the two after loading)."""
    return EMBED if cfg.tie_word_embeddings else LM_HEAD
