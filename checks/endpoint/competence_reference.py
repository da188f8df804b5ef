"""The reference side of the endpoint competence probes: the same texts through the reference engine, so a
server's figures sit beside its checkpoint's (`probe endpoint --model`). The reference reads each text with its
own tokenizer and BOS policy (probes.competence.corpus.bos_prefix), as the engine checks do."""
from __future__ import annotations

from dataclasses import dataclass

from checks.context import ResourceError
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


def optional_reference(ctx):
    """The reference when `--model` was given, else None (the probes then judge the server alone)."""
    try:
        return ctx.reference
    except ResourceError:
        return None


def bos_text(ref) -> str | None:
    """The BOS token's text (sent first where a server's echo needs a BOS to line up), None without one."""
    bos = ref.tokenizer.bos_token_id if ref is not None else None
    return ref.tokenizer.decode([bos]) if bos is not None else None


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


def greedy_texts(ctx, prompts: list[str], max_tokens: int) -> list[str]:
    """The reference's greedy continuations of text prompts (one batch), read as a completion server reads them."""
    from reference_engine.generate import SamplingParams
    tok = ctx.reference.tokenizer
    room = max(ctx.reference.max_context - max_tokens, 1)      # the continuation must fit too
    ids = [(bos_prefix(tok) + [int(t) for t in tok.encode(p, add_special_tokens=False)])[:room] for p in prompts]
    params = SamplingParams(temperature=0.0, max_new_tokens=max_tokens, ignore_eos=True)
    return [out.text for out in ctx.engine().generate(ids, params)]
