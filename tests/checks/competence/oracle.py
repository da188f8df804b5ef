"""The outside judge for the broken copies: transformers runs the weights a correct loader reads from the files
(Broken.effective) as a float model, and its loss on the built-in text says whether the copy talks nonsense."""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from probes.competence import copy_prompt, copy_score, mean_loss, text_prompt, token_logprobs, unigram_loss
from tests import oracle_cache


def transformers_model(model_dir: Path, weights: dict[str, torch.Tensor]):
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(model_dir)
    config = config.__class__.from_dict({**json.loads((Path(model_dir) / "config.json").read_text()),
                                         "quantization_config": None, "torch_dtype": "float32"})
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    assert all("lm_head" in m for m in missing), missing          # tied head only
    model.tie_weights()
    return model


def judge(model_dir: Path, weights: dict[str, torch.Tensor], tokenizer_dir: Path) -> dict:
    """transformers' mean loss on the quick built-in text and copy ratio for these weights, with the bounds (asked
    once per copy's bytes and transformers version: tests/oracle_cache.py; `weights` are what a correct loader reads
    from those bytes)."""
    from transformers import AutoConfig, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = text_prompt(tok, quick=True)
    cp = copy_prompt(tok, AutoConfig.from_pretrained(model_dir).vocab_size)

    def ask():
        model = transformers_model(model_dir, weights)
        with torch.no_grad():
            logits = model(torch.tensor([text.ids])).logits[0]
            copy_logits = model(torch.tensor([cp.ids])).logits[0]
        loss = mean_loss(token_logprobs(logits, text.ids))
        return {"loss": loss, "unigram": unigram_loss(text.scored_ids), "ln_v": math.log(model.config.vocab_size),
                "copy_ratio": copy_score(token_logprobs(copy_logits, cp.ids), cp.start, cp.length).ratio}
    asked = {"text": list(text.ids), "scored": list(text.scored_ids), "copy": [list(cp.ids), cp.start, cp.length]}
    return oracle_cache.answer("competence-judge", [Path(model_dir), Path(tokenizer_dir)], asked, ask)
