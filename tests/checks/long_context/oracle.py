"""The outside judge for the long-context faults: transformers reads the same distance prompt
(probes/competence/distance.py) and its copy ratio per distance and passage losses say whether a copy reads
near and not far. Logits are made in row blocks from the last hidden state (Gemma 3's 262k vocabulary would
make a [1016, 262144] float32 block of 1 GB)."""
from __future__ import annotations

from pathlib import Path

import torch

from probes.competence import token_logprobs
from probes.competence.distance import distance_prompt, distance_score
from tests import oracle_cache

ROWS = 128


def logprobs(model, ids) -> list[float]:
    with torch.no_grad():
        hidden = model.model(torch.tensor([list(ids)])).last_hidden_state[0]        # [T, hidden]
        out = []
        for at in range(0, len(ids), ROWS):
            logits = model.lm_head(hidden[at:at + ROWS])                             # [rows, vocab]
            out += token_logprobs(logits, ids[at:at + ROWS + 1])
    return out


def transformers_reading(model_dir, tokens: int) -> dict:
    """{"distances", "copy_ratios", "passage_ratios"} of transformers on the model at `model_dir` (asked once per
    copy's bytes and transformers version: tests/oracle_cache.py)."""
    from transformers import AutoConfig, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompt = distance_prompt(tok, AutoConfig.from_pretrained(model_dir).vocab_size, tokens)

    def ask():
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        score = distance_score(prompt, logprobs(model, prompt.ids), logprobs(model, prompt.near))
        return {"distances": [p.distance for p in prompt.pairs], "copy_ratios": [c.ratio for c in score.copies],
                "passage_ratios": [f / n for f, n in zip(score.far_loss, score.near_loss)]}
    asked = {"tokens": tokens, "ids": list(prompt.ids), "near": list(prompt.near),
             "pairs": [repr(p) for p in prompt.pairs]}
    return oracle_cache.answer("context-reading", [Path(model_dir)], asked, ask)
