"""The family's engine run: one prefill of the built-in text and one of the copy prompt, shared by CMP001 and
CMP002 and riding on the shared passes when the engine streams (COMPETENCE, checks/shared/passes.py). Only the
per-token log-probabilities are kept (a [tokens, vocab] float32 logits row block is dropped at once)."""
from __future__ import annotations

from dataclasses import dataclass

from checks.catalogue.registry import SharedRun, Skip
from checks.shared.passes import Part
from probes.competence import CopyPrompt, TextPrompt, copy_prompt, text_prompt, token_logprobs

KEY = "competence"


@dataclass
class CompetenceRun:
    text: TextPrompt
    copy: CopyPrompt | None            # None: the vocabulary has too few ordinary word pieces (or no room)
    text_logprobs: list[float]         # log P(text.ids[i + 1] | text.ids[:i + 1])
    copy_logprobs: list[float] | None


def prompts(ctx) -> tuple[TextPrompt, CopyPrompt | None]:
    """This run's text and copy prompts (cached): the model's tokenizer picks the parts, the context bounds them."""
    key = (KEY, "prompts", ctx.quick)
    if key not in ctx.state:
        cfg = ctx.engine.config
        try:
            tok = ctx.tokenizer
            text = text_prompt(tok, ctx.quick, cfg.max_position_embeddings)
            copy = copy_prompt(tok, cfg.vocab_size)
        except Exception as e:      # a tokenizer that cannot encode plain text is GLD001's and TOK's finding
            raise Skip(f"the built-in text cannot be encoded ({type(e).__name__}: {e})") from None
        if not text.spans or any(not 0 <= t < cfg.vocab_size for t in text.ids):
            raise Skip("no part of the built-in text applies to this tokenizer "
                       f"({'; '.join(f'{k}: {v}' for k, v in text.skipped.items()) or 'none fits the context'})")
        if copy is not None and (len(copy.ids) > cfg.max_position_embeddings
                                 or any(not 0 <= t < cfg.vocab_size for t in copy.ids)):
            copy = None
        ctx.state[key] = (text, copy)
    return ctx.state[key]


def _store(ctx, text: TextPrompt, copy: CopyPrompt | None, logits: list) -> None:
    copy_lp = token_logprobs(logits[1], copy.ids) if copy is not None else None
    ctx.state[(KEY, ctx.quick)] = CompetenceRun(text, copy, token_logprobs(logits[0], text.ids), copy_lp)


def _requests(text, copy) -> list[list[int]]:
    return [list(text.ids)] + ([list(copy.ids)] if copy is not None else [])


def competence_part(ctx) -> Part:
    """The two prefills as throwaway requests riding on the shared passes."""
    from reference_engine.streaming.sweep import LogitsRequest
    text, copy = prompts(ctx)
    return Part([LogitsRequest(ids) for ids in _requests(text, copy)], [],
                lambda ctx, logits, _: _store(ctx, text, copy, logits))


COMPETENCE = SharedRun("competence", competence_part)     # competence_run(ctx): CMP001, CMP002


def competence_run(ctx) -> CompetenceRun:
    """The run (once per check run): from the shared pass when it made it, else one prefill of each prompt."""
    ctx.prepare_engine_runs()
    key = (KEY, ctx.quick)
    if key not in ctx.state:
        text, copy = prompts(ctx)
        _store(ctx, text, copy, ctx.engine.logits_many(_requests(text, copy)))
    return ctx.state[key]
