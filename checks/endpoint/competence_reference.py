"""The reference side of the endpoint competence probes: the same texts through the reference engine, so a
server's figures sit beside its checkpoint's (`probe endpoint --model`). The reference reads each text with its
own tokenizer and BOS policy (probes.competence.corpus.bos_prefix), as the engine checks do."""
from __future__ import annotations

from checks.catalogue.inputs import ResourceError
from checks.shared.scoring import ReferenceText, fits, score_copy, score_text  # noqa: F401 (the shared ones)
from probes.competence.corpus import bos_prefix


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


def greedy_texts(ctx, prompts: list[str], max_tokens: int) -> list[str]:
    """The reference's greedy continuations of text prompts (one batch), read as a completion server reads them."""
    from reference_engine.generate import SamplingParams
    tok = ctx.reference.tokenizer
    room = max(ctx.reference.max_context - max_tokens, 1)      # the continuation must fit too
    ids = [(bos_prefix(tok) + [int(t) for t in tok.encode(p, add_special_tokens=False)])[:room] for p in prompts]
    params = SamplingParams(temperature=0.0, max_new_tokens=max_tokens, ignore_eos=True)
    return [out.text for out in ctx.engine().generate(ids, params)]
