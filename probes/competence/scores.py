"""Scores from per-token log-probabilities: mean loss, the unigram baseline, the copy ratio. They take
log-probs (lists of floats), never an engine, so a server's prompt logprobs feed them as well as our engine's
logits (token_logprobs)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import torch


def token_logprobs(logits: torch.Tensor, ids: Sequence[int]) -> list[float]:
    """log P(ids[i + 1] | ids[:i + 1]) for i < len(ids) - 1, from logits [len(ids), vocab] (any float dtype;
    computed in float32). A row with NaN/Inf gives -inf: a broken model must not score as a good one."""
    rows = logits[:len(ids) - 1].float()                                    # [T-1, V]
    target = torch.tensor(list(ids[1:]), dtype=torch.long, device=rows.device)
    out = torch.log_softmax(rows, -1).gather(1, target[:, None])[:, 0]    # [T-1]
    return [v if math.isfinite(v) else -math.inf for v in out.tolist()]


def mean_loss(logprobs: Sequence[float]) -> float:
    """Mean negative log-likelihood in nats (inf when any log-prob is -inf/NaN; nan when there are none)."""
    if not logprobs:
        return math.nan
    if any(not math.isfinite(v) for v in logprobs):
        return math.inf
    return -sum(logprobs) / len(logprobs)


def unigram_loss(ids: Sequence[int]) -> float:
    """The loss of the best unigram model of these very tokens (their own frequencies, fitted on the text it
    scores): -sum p ln p over the token counts, in nats. Optimistic for a unigram model (it knows the text's
    vocabulary in advance), so a model that does not beat it uses no context at all."""
    counts = Counter(int(t) for t in ids)
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values()) if n else math.nan


@dataclass(frozen=True)
class CopyScore:
    first: float              # mean loss over the first copy (tokens 2.. of it: no context to guess from)
    second: float             # mean loss over the second copy (tokens 2.. of it: the first copy shows them)
    ratio: float              # second / first: ~0.1 for a trained decoder (induction), ~1 for a broken one

    def as_dict(self) -> dict:
        return {"first_copy_loss": self.first, "second_copy_loss": self.second, "copy_ratio": self.ratio}


def copy_score(logprobs: Sequence[float], start: int, length: int, second: int | None = None) -> CopyScore:
    """The copy test's score from the next-token log-probs of a prompt whose tokens [start, start + length)
    and [second, second + length) are the same sequence (second defaults to start + length: the copies side
    by side; distance.py puts filler between them). logprobs[i] scores token i + 1. The first token of each
    copy is left out: nothing before it says what it is."""
    at = start + length if second is None else second
    first = mean_loss(logprobs[start:start + length - 1])                 # tokens start+1 .. start+length-1
    again = mean_loss(logprobs[at:at + length - 1])                       # tokens at+1 .. at+length-1
    if math.isfinite(first) and first > 0:
        ratio = again / first
    else:
        ratio = math.inf if not math.isfinite(again) or again > 0 else 1.0
    return CopyScore(first, again, ratio)
