"""Two servers' answers to the same greedy request, token by token: where they part, each side's margin there,
and the KL divergence their returned top logprobs allow at each position they share.

Servers name tokens by their text (vLLM gives no ids), so pieces are compared as text. The KL is a lower bound of
the full one (see top_kl): a server that returns 5 alternatives still gives a number that only misses what lies
outside them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from probes.endpoint.types import TokenLogprob

FLOOR = 1e-10        # the probability an empty "rest" is given, so a KL term stays finite


@dataclass(frozen=True)
class Margin:
    """How much more a side liked its own token than the other side's pick, in nats. `exact` False: the other
    pick is not in this side's top list, so the margin is at least `nats` (its own logprob minus the last listed)."""
    nats: float | None          # None: the side returned no logprobs
    exact: bool = True

    def describe(self) -> str:
        if self.nats is None:
            return "unknown (no logprobs)"
        return f"{self.nats:.3f} nats" if self.exact else f"> {self.nats:.3f} nats (other pick not in its top list)"


@dataclass(frozen=True)
class Divergence:
    step: int                   # first position (0-based) where the pieces differ or one answer ended
    ref_piece: str | None       # None: that answer had ended
    cand_piece: str | None
    ref_margin: Margin
    cand_margin: Margin

    def shown(self, piece: str | None) -> str:
        return "<end of answer>" if piece is None else repr(piece)

    def near_tie(self, tie_nats: float) -> bool:
        """Both sides' margins known and within tie_nats: a flip between two almost equal tokens."""
        margins = (self.ref_margin, self.cand_margin)
        return all(m.nats is not None and m.exact and m.nats <= tie_nats for m in margins)


def visible(tokens: list[TokenLogprob] | None) -> list[TokenLogprob] | None:
    """The tokens without the trailing ones of empty text: llama-server lists the end-of-turn token that stopped
    an answer (as ""), llama-cpp-python and vLLM do not; the two answers are the same."""
    if not tokens:
        return tokens
    end = len(tokens)
    while end and tokens[end - 1].token == "":
        end -= 1
    return tokens[:end]


def pieces(tokens: list[TokenLogprob] | None, text: str) -> list[str]:
    """The answer as pieces: the logprob tokens when the server sent them, else the text as one piece."""
    tokens = visible(tokens)
    return [t.token for t in tokens] if tokens else ([text] if text else [])


def first_difference(a: list[str], b: list[str]) -> int | None:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if at is None and len(a) != len(b):
        at = min(len(a), len(b))
    return at


def margin(token: TokenLogprob | None, other_pick: str | None) -> Margin:
    """The side's logprob of its own pick minus that of the other side's pick, from its own top list."""
    if token is None or token.logprob is None or other_pick is None:
        return Margin(None)
    if other_pick in token.top:
        return Margin(token.logprob - token.top[other_pick])
    if not token.top:
        return Margin(None)
    return Margin(token.logprob - min(token.top.values()), exact=False)


def divergence(ref: list[TokenLogprob] | None, ref_text: str, cand: list[TokenLogprob] | None,
               cand_text: str) -> Divergence | None:
    """Where two greedy answers part (None: identical pieces)."""
    ref, cand = visible(ref), visible(cand)
    a, b = pieces(ref, ref_text), pieces(cand, cand_text)
    at = first_difference(a, b)
    if at is None:
        return None
    pa, pb = (a[at] if at < len(a) else None), (b[at] if at < len(b) else None)
    ta = ref[at] if ref and at < len(ref) else None
    tb = cand[at] if cand and at < len(cand) else None
    return Divergence(at, pa, pb, margin(ta, pb), margin(tb, pa))


def top_kl(p: dict[str, float], q: dict[str, float]) -> float | None:
    """The least KL(P || Q) two top lists of logprobs allow (None: an empty list).

    Cells: each piece in both lists; `missing`, the pieces of P's list that Q does not list (Q gives each at most
    its own last listed probability); the rest. Merging pieces into cells never raises a KL divergence, and Q's
    share of `missing` is only bounded, so it is set where it makes the KL least: proportional to P's share
    (q_missing / q_rest = p_missing / p_rest), capped by what Q's list allows."""
    if not p or not q:
        return None
    common = [k for k in p if k in q]
    ps, qs = [math.exp(p[k]) for k in common], [math.exp(q[k]) for k in common]
    p_missing = sum(math.exp(v) for k, v in p.items() if k not in q)
    q_left = max(1.0 - sum(math.exp(v) for v in q.values()), 0.0)      # what Q's list does not place
    cap = min((len(p) - len(common)) * math.exp(min(q.values())), q_left)
    p_rest = max(1.0 - sum(ps) - p_missing, 0.0)
    m = max(1.0 - sum(qs), 0.0)                                         # Q's mass outside the common pieces
    q_missing = min(m * p_missing / (p_missing + p_rest), cap) if p_missing + p_rest > 0 else 0.0
    cells = list(zip(ps, qs)) + [(p_missing, q_missing), (p_rest, m - q_missing)]
    return max(sum(x * math.log(x / max(y, FLOOR)) for x, y in cells if x > FLOOR), 0.0)


def kl_by_position(ref: list[TokenLogprob] | None, cand: list[TokenLogprob] | None,
                   upto: int | None) -> list[float | None]:
    """KL(ref || cand) at each position both answers reached with the same context: every position up to and
    including the first difference `upto` (None: all shared positions). A side's own pick joins its top list."""
    ref, cand = visible(ref), visible(cand)
    if not ref or not cand:
        return []
    n = min(len(ref), len(cand)) if upto is None else min(upto + 1, len(ref), len(cand))
    return [top_kl(_with_pick(ref[i]), _with_pick(cand[i])) for i in range(n)]


def _with_pick(token: TokenLogprob) -> dict[str, float]:
    top = dict(token.top)
    if token.logprob is not None:
        top.setdefault(token.token, token.logprob)
    return top
