"""The logits-processor pipeline and token selection.

Everything runs in float32 whatever the model dtype: fp16/bf16 logits are upcast first and probabilities come
from log_softmax (max-subtracted), so nothing overflows. The pipeline is the one vLLM and transformers use:

    penalties -> temperature -> top-k -> top-p -> min-p -> log_softmax -> argmax or sample

Filtered tokens get -inf logits, so their probability is exactly 0. Sampling uses a per-request
torch.Generator, so a seeded request draws the same tokens whatever else shares its batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from reference_engine.generate.sampling_params import SamplingParams

NEG_INF = float("-inf")


@dataclass
class Choice:
    token_id: int
    logprob: float          # log-probability of token_id under the distribution it was drawn from
    eos_prob: float = 0.0   # P(any EOS id) under that distribution (for the EOS-patience heuristic)


# ---------------------------------------------------------------------------------------------- processors

def apply_repetition_penalty(logits: torch.Tensor, context_ids: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' CTRL penalty: for ids seen in the context, logit > 0 is divided by penalty, else multiplied."""
    if penalty == 1.0 or context_ids.numel() == 0:
        return logits
    seen = logits.gather(-1, context_ids)                               # [n]
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, context_ids, seen)


def entropy_temperature(logits: torch.Tensor, low: float, high: float) -> float:
    """The seed's dynamic temperature: flat distribution -> low, peaked one -> high (linear in entropy/log V)."""
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum().item()
    normalised = min(max(entropy / math.log(logits.shape[-1]), 0.0), 1.0) if logits.shape[-1] > 1 else 0.0
    return high - (high - low) * normalised


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits (ties with the k-th are kept, as transformers does)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]               # [..., 1]
    return logits.masked_fill(logits < kth, NEG_INF)


def apply_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest most-likely set whose mass is >= p: drop a token when the mass before it is >= p."""
    if p >= 1.0:
        return logits
    probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= p
    drop_sorted[..., 0] = False                                         # always keep the most likely token
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, NEG_INF)


def apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens whose probability is below min_p times the top probability (log space: exact and stable)."""
    if min_p <= 0.0:
        return logits
    top = logits.max(dim=-1, keepdim=True).values
    return logits.masked_fill(logits < top + math.log(min_p), NEG_INF)


def process_logits(logits: torch.Tensor, params: SamplingParams,
                   context_ids: torch.Tensor | None = None) -> torch.Tensor:
    """logits [V] (any float dtype) -> float32 logprobs [V] of the distribution the request samples from."""
    x = logits.float()
    if context_ids is not None and params.repetition_penalty != 1.0:
        x = apply_repetition_penalty(x, context_ids, params.repetition_penalty)
    if not params.greedy:
        temperature = params.temperature
        if params.dynamic_temperature is not None:
            temperature = entropy_temperature(x, *params.dynamic_temperature)
        x = x / temperature
        x = apply_top_k(x, params.top_k)
        x = apply_top_p(x, params.top_p)
        x = apply_min_p(x, params.min_p)
    return torch.log_softmax(x, dim=-1)


# ---------------------------------------------------------------------------------------------- selection

def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator:
    """A request's own RNG. Unseeded requests draw their seed from torch's global RNG, so torch.manual_seed
    still makes a whole run reproducible."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, ()).item()))
    return generator


def sample(logprobs: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one id from exp(logprobs) [V]: argmax(p / E) with E ~ Exp(1) is an exact categorical draw
    (the exponential race), needs no normalisation and no host sync inside torch.multinomial."""
    noise = torch.empty_like(logprobs).exponential_(1.0, generator=generator)
    return int(torch.argmax(logprobs.exp() / noise).item())


def choose(logits: torch.Tensor, params: SamplingParams, context_ids: torch.Tensor | None,
           generator: torch.Generator | None, eos_ids: list[int] = ()) -> Choice:
    """Process one row of logits [V] and pick the next token (argmax when greedy)."""
    logprobs = process_logits(logits, params, context_ids)
    if params.greedy or generator is None:
        token = int(torch.argmax(logprobs).item())
    else:
        token = sample(logprobs, generator)
    eos_prob = 0.0
    if params.eos_patience and eos_ids:
        ids = torch.tensor([i for i in eos_ids if i < logprobs.shape[-1]], dtype=torch.long, device=logprobs.device)
        eos_prob = float(logprobs.index_select(-1, ids).exp().sum().item()) if ids.numel() else 0.0
    return Choice(token, float(logprobs[token].item()), eos_prob)


def greedy_fast_path(logits: torch.Tensor) -> list[int]:
    """logits [B, V] -> argmax ids, for rows with no penalty and no logprobs: the processed distribution's
    argmax is the raw argmax, so nothing else needs computing."""
    return torch.argmax(logits, dim=-1).tolist()


# ---------------------------------------------------------------------------------------------- validation

def validate_distribution(logprobs: torch.Tensor, params: SamplingParams, raw_logits: torch.Tensor) -> list[str]:
    """Sampler invariants on one processed row: non-empty, finite, normalised, top-p kept mass >= p.
    raw_logits: the row before temperature (after any repetition penalty)."""
    problems = []
    try:
        probs = logprobs.float().exp()
        kept = torch.isfinite(logprobs)
        if not bool(kept.any()):
            return ["sampler: the filtered distribution is empty (every token was masked)"]
        if not bool(torch.isfinite(probs).all()):
            problems.append("sampler: probabilities contain NaN or inf")
        total = float(probs.sum().item())
        if abs(total - 1.0) > 1e-3:
            problems.append(f"sampler: filtered probabilities sum to {total:.6f}, not 1")
        # raw_logits carry no repetition penalty, so the kept mass is only comparable without one
        if (not params.greedy and params.top_p < 1.0 and params.top_k == 0 and params.min_p == 0.0
                and params.dynamic_temperature is None and params.repetition_penalty == 1.0):
            base = torch.softmax(raw_logits.float() / params.temperature, dim=-1)
            mass = float(base[kept].sum().item())
            if mass + 1e-5 < params.top_p:
                problems.append(f"sampler: top-p kept mass {mass:.6f} < top_p {params.top_p}")
    except Exception as e:  # validate() never raises
        problems.append(f"sampler: could not validate the distribution ({type(e).__name__}: {e})")
    return problems
