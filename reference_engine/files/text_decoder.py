"""The text decoder inside a multimodal checkpoint (`...ForConditionalGeneration`: Gemma 3 4B-27B, Mistral Small
3.x, Llama 4, Qwen-VL), under the names a causal LM's tensors have, so every family's plan reads it unchanged.

Checkpoints put the decoder under one of two prefixes: the original layout (`language_model.model.layers...`,
`language_model.lm_head.weight`; what transformers still writes on save) or transformers' newer one
(`model.language_model.layers...`, `lm_head.weight`); flat Qwen-VL checkpoints keep `model.layers...` beside
`visual.*`. The vision tower and the projector keep their own names and stay readable for the file checks; the
engine leaves them unread (`droppable`).
"""
from __future__ import annotations

from dataclasses import replace

from reference_engine.config import ModelConfig
from reference_engine.files.weights import Weights

DECODER_PREFIXES = (("model.language_model.", "model."), ("language_model.model.", "model."),
                    ("language_model.lm_head.", "lm_head."))
DECODER_NAMES = ("model.layers.", "model.embed_tokens.", "model.norm.", "lm_head.")


def decoder_name(name: str) -> str | None:
    """The causal-LM name of a multimodal checkpoint's tensor, or None when it is not the text decoder's."""
    for old, new in DECODER_PREFIXES:
        if name.startswith(old):
            return new + name[len(old):]
    return name if name.startswith(DECODER_NAMES) else None


def text_decoder_view(weights: Weights) -> Weights:
    names = {name: decoder_name(name) for name in weights.names}
    return weights.renamed({old: new for old, new in names.items() if new is not None},
                           droppable=frozenset(old for old, new in names.items() if new is None))


def tie_from_files(config: ModelConfig, view: Weights) -> ModelConfig:
    """transformers ties a wrapper's head by the wrapper's flag, but keeps a stored head whose values differ
    (Mistral Small 3.x: the flag is True by class default, the checkpoint has its own lm_head): the files decide."""
    tied = "lm_head.weight" not in view
    if tied == config.tie_word_embeddings:
        return config
    return replace(config, tie_word_embeddings=tied, raw={**config.raw, "tie_word_embeddings": tied})
