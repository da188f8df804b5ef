"""Greedy continuations the family tests compare: the engine's (prefill, then decode steps through the paged
cache) and transformers' own generate, both argmax, no stopping."""
from __future__ import annotations

import torch


def greedy(eng, prompt: list[int], steps: int) -> list[int]:
    """Prefill then decode steps through the paged cache, argmax each time."""
    with eng.scratch() as (seq,):
        out = [int(eng.prefill([seq], [prompt])[0].argmax())]
        while len(out) < steps:
            out.append(int(eng.decode([seq], [out[-1]])[0].argmax()))
    return out


def hf_greedy(model, prompt: list[int], steps: int) -> list[int]:
    """transformers' generate, greedy, exactly `steps` new tokens (no eos stop)."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=steps,
                             min_new_tokens=steps, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()
