"""validate() of the detokenizer stage: the seed article's closed loop, plus the sampler's invariants.

    prompt -> engine.logits -> last position -> softmax -> argmax -> decode

Checks that the argmax id exists in the tokenizer and the embedding, the probabilities are finite and sum to
1, the decoded piece is valid text, and the sampler's filtered distributions for a few common settings are
non-empty, normalised, and keep at least top_p of the mass. Pure and never raises: [] when healthy.
"""
from __future__ import annotations

import torch

from reference_engine.generate.sampler import apply_repetition_penalty, process_logits, validate_distribution
from reference_engine.generate.sampling_params import SamplingParams

PROBE_PROMPT = "The capital of France is"
PROBE_SETTINGS = (
    SamplingParams(temperature=0.7, top_p=0.9),
    SamplingParams(temperature=1.0, top_k=50),
    SamplingParams(temperature=0.8, min_p=0.05),
    SamplingParams(temperature=1.0, top_p=0.5, repetition_penalty=1.2),
)


def validate(engine, prompt=None, logits=None) -> list[str]:
    """Problems found by one closed-loop step on `prompt` (a string or ids; a default English probe).
    logits: the prompt's last-position logits [vocab] when already computed (no engine pass is run)."""
    try:
        ids = _prompt_ids(engine, prompt)
        if logits is None:
            logits = engine.logits(ids)[-1]                                # [vocab] of the last position
    except Exception as e:
        return [f"closed loop: could not run the model on the probe prompt ({type(e).__name__}: {e})"]
    problems = _check_probabilities(logits)
    if problems:
        return problems  # argmax and sampling of a NaN distribution say nothing more
    problems += _check_argmax_piece(engine, logits)
    context = torch.tensor(ids, dtype=torch.long, device=logits.device)
    for params in PROBE_SETTINGS:
        try:
            logprobs = process_logits(logits, params, context)
        except Exception as e:
            problems.append(f"sampler: {params_label(params)} raised {type(e).__name__}: {e}")
            continue
        # the top-p bound is checked against the distribution top-p saw: after the repetition penalty
        penalised = apply_repetition_penalty(logits.float(), context, params.repetition_penalty)
        problems += [f"{p} ({params_label(params)})" for p in validate_distribution(logprobs, params, penalised)]
    return problems


def params_label(params: SamplingParams) -> str:
    changed = [f"{k}={v}" for k, v in (("temperature", params.temperature), ("top_k", params.top_k),
                                       ("top_p", params.top_p), ("min_p", params.min_p),
                                       ("repetition_penalty", params.repetition_penalty))
               if v != getattr(SamplingParams, k)]
    return ", ".join(changed) or "greedy"


def _prompt_ids(engine, prompt) -> list[int]:
    if prompt is None or isinstance(prompt, str):
        return list(engine.tokenizer.encode(prompt or PROBE_PROMPT))
    return [int(t) for t in prompt]


def _check_probabilities(logits: torch.Tensor) -> list[str]:
    logits = logits.float()
    bad = int((~torch.isfinite(logits)).sum())
    if bad:
        return [f"closed loop: {bad} of {logits.numel()} last-position logits are NaN or inf"]
    probs = torch.softmax(logits, dim=-1)
    total = float(probs.sum())
    if not torch.isfinite(probs).all() or abs(total - 1.0) > 1e-3:
        return [f"closed loop: softmax of the last-position logits sums to {total:.6f}, not 1"]
    return []


def _check_argmax_piece(engine, logits: torch.Tensor) -> list[str]:
    token = int(torch.argmax(logits))
    tokenizer = engine.tokenizer
    problems = []
    if not 0 <= token < engine.config.vocab_size:
        problems.append(f"closed loop: argmax id {token} is outside the embedding ({engine.config.vocab_size} rows)")
    if token >= len(tokenizer):
        problems.append(f"closed loop: argmax id {token} has no token in the tokenizer (len {len(tokenizer)}): "
                        "the model prefers an embedding padding row")
        return problems
    try:
        piece = tokenizer.decode([token])
        if not isinstance(piece, str):
            problems.append(f"closed loop: decode([{token}]) returned {type(piece).__name__}, not text")
        else:
            piece.encode("utf-8")  # lone surrogates cannot be encoded: not valid text
    except UnicodeEncodeError:
        problems.append(f"closed loop: decode([{token}]) is not valid UTF-8 text")
    except Exception as e:
        problems.append(f"closed loop: decode([{token}]) raised {type(e).__name__}: {e}")
    return problems
