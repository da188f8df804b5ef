"""Scoring a text with the reference engine, the one implementation every family of checks uses: the mean
loss of a text (`score_text`) and the copy score of a text shown twice (`score_copy`). The reference reads each
text with its own tokenizer and BOS policy (probes.competence.corpus.bos_prefix). `ctx` is any context with
`reference` (tokenizer, max_context) and `engine()`."""
from __future__ import annotations

from dataclasses import dataclass

from probes.competence import copy_score, mean_loss, token_logprobs, unigram_loss
from probes.competence.corpus import bos_prefix
from probes.competence.scores import CopyScore


@dataclass
class ReferenceText:
    logprobs: list[float]          # the text's tokens after the first (or all of them behind a BOS)
    ids: list[int]                 # the scored tokens

    @property
    def loss(self) -> float:
        return mean_loss(self.logprobs)

    @property
    def unigram(self) -> float:
        return unigram_loss(self.ids)


def fits(ctx, ids: list[int]) -> list[int]:
    """ids cut to the reference's context (a small model's vocabulary may spell a part in more tokens)."""
    return ids[:ctx.reference.max_context]


def score_text(ctx, text: str) -> ReferenceText:
    tok = ctx.reference.tokenizer
    prefix = bos_prefix(tok)
    ids = fits(ctx, prefix + [int(t) for t in tok.encode(text, add_special_tokens=False)])
    logprobs = token_logprobs(ctx.engine().logits(ids), ids)      # logprobs[i] scores ids[i + 1]
    return ReferenceText(logprobs, ids[1:])


def score_copy(ctx, one: str) -> CopyScore | None:
    """The copy score of `one` shown twice, or None when the reference tokenizes the two copies differently."""
    tok = ctx.reference.tokenizer
    half = [int(t) for t in tok.encode(one, add_special_tokens=False)]
    ids = [int(t) for t in tok.encode(one + one, add_special_tokens=False)]
    if ids != half + half or len(ids) + 1 > ctx.reference.max_context:
        return None
    prefix = bos_prefix(tok)
    ids = prefix + ids
    return copy_score(token_logprobs(ctx.engine().logits(ids), ids), len(prefix), len(half))
