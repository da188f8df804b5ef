"""Greedy answers compared with each other: exact match, near-tie flip, corruption, cross-talk.

The baseline of a probe is its first solo answer. Another answer that differs is classified at the first token
where the two differ (vLLM's check_logprobs_close rule, tests/models/utils.py): when each side's token is in the
other side's top-k and the logprob gaps are small, the two were nearly tied and a different batch shape may pick
either (a near-tie flip); otherwise the answer was computed wrongly (corruption). An answer that carries another
request's content (a background request's nonce, or the start of another probe's or request's answer) is
cross-talk, whatever its tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

from probes.load.types import ProbeAnswer, Sample
from probes.load.workload import NONCE

NEAR_TIE_NATS = 1.0       # logprob gap under which two top-k tokens count as tied
CROSSTALK_CHARS = 16      # a shared opening this long with another request's answer is that answer
END_PIECES = {"", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<end_of_turn>", "<|end|>", "<|eot|>"}


@dataclass
class Divergence:
    kind: str                  # "match", "near-tie", "corruption", "cross-talk", "failed"
    position: int | None = None
    base_token: str | None = None
    other_token: str | None = None
    gaps: tuple[float | None, float | None] = (None, None)   # nats, in the baseline's and the other's top-k
    detail: str = ""

    def as_dict(self) -> dict:
        out = {"kind": self.kind}
        if self.position is not None:
            out.update(position=self.position, baseline_token=self.base_token, other_token=self.other_token,
                       gaps_nats=[None if g is None else round(g, 4) for g in self.gaps])
        if self.detail:
            out["detail"] = self.detail
        return out


def token_texts(answer: ProbeAnswer) -> list[str]:
    return [t.token for t in answer.tokens]


def first_divergence(base: ProbeAnswer, other: ProbeAnswer) -> Divergence:
    """Where `other` leaves `base`, and whether the tokens there were a near tie."""
    a, b = token_texts(base), token_texts(other)
    if not a and not b:
        if base.text == other.text:
            return Divergence("match")
        return Divergence("corruption", detail=f"texts differ and no tokens to compare: {other.text[:60]!r}")
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if n is None:
        if len(a) == len(b):
            return Divergence("match")
        n = min(len(a), len(b))         # one ended earlier: the end token vs a text token
        shorter_base = len(a) < len(b)
        end = f"<end: {(base if shorter_base else other).finish_reason}>"
        tok_a, tok_b = (end, b[n]) if shorter_base else (a[n], end)
        longer = (other if shorter_base else base).tokens[n]
        # servers do not return the end-of-turn token itself; the side that went on may list it in its top-k
        gap = min((abs(longer.top.get(longer.token, max(longer.top.values())) - lp)
                   for piece, lp in longer.top.items() if piece.strip() in END_PIECES), default=None)
        if gap is not None and gap <= NEAR_TIE_NATS and (base if shorter_base else other).finish_reason == "stop":
            return Divergence("near-tie", n, tok_a, tok_b, (gap, gap), detail="the end of the turn was nearly tied")
        return Divergence("corruption", n, tok_a, tok_b, detail="one answer ends where the other goes on")
    ta, tb = base.tokens[n], other.tokens[n]
    gap_a = _gap(ta.top, ta.token, tb.token)
    gap_b = _gap(tb.top, tb.token, ta.token)
    near = gap_a is not None and gap_b is not None and gap_a <= NEAR_TIE_NATS and gap_b <= NEAR_TIE_NATS
    return Divergence("near-tie" if near else "corruption", n, ta.token, tb.token, (gap_a, gap_b))


def _gap(top: dict[str, float], own: str, other: str) -> float | None:
    """own's logprob minus other's in one side's top-k; None when `other` is not in that top-k."""
    if other not in top:
        return None
    own_lp = top.get(own)
    if own_lp is None:
        own_lp = max(top.values())
    return abs(own_lp - top[other])


def crosstalk(answer: ProbeAnswer, own_solo: str, others: dict[str, str], background: list[Sample]) -> str | None:
    """What foreign content `answer` carries, or None. others: probe name -> its solo answer text."""
    text = answer.text
    for nonce in sorted(set(NONCE.findall(text))):
        owner = next((s.prompt_id for s in background if nonce in s.prompt_id), "a background request")
        return f"the answer names {nonce}, the order code of {owner}"
    head = text[:CROSSTALK_CHARS]
    if len(head) < CROSSTALK_CHARS or own_solo.startswith(head):
        return None
    for name, other in others.items():
        if other.startswith(head):
            return f"the answer is probe {name!r}'s answer ({head!r}...)"
    for sample in background:
        if sample.text.startswith(head):
            return f"the answer is background request {sample.prompt_id}'s answer ({head!r}...)"
    return None


def classify(answers: list[ProbeAnswer], solo: list[ProbeAnswer], background: list[Sample]) -> list[dict]:
    """Each answer against its probe's first solo answer: [{probe, phase, kind, ...}]."""
    baselines = {}
    for a in solo:
        if not a.error and a.probe not in baselines:
            baselines[a.probe] = a
    texts = {name: a.text for name, a in baselines.items()}
    out = []
    for answer in answers:
        base = baselines.get(answer.probe)
        if answer.error or base is None:
            why = answer.error or "no solo answer to compare with"
            out.append({"probe": answer.probe, "phase": answer.phase, "kind": "failed", "detail": why})
            continue
        if answer is base:
            continue
        others = {k: v for k, v in texts.items() if k != answer.probe}
        foreign = crosstalk(answer, base.text, others, background)
        result = Divergence("cross-talk", detail=foreign) if foreign else first_divergence(base, answer)
        out.append({"probe": answer.probe, "phase": answer.phase, **result.as_dict()})
    return out
