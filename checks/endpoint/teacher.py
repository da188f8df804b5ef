"""Teacher forcing: run the reference engine over the server's own prompt + continuation in one prefill and
read, at every generated position, what the reference would have picked and how it ranks the server's token.

Servers return generated tokens as text pieces; each piece is mapped back to ids through the reference vocab
(an empty piece is a control token the server does not print: any special id). Where a piece maps to several
ids the one the reference ranks highest is taken.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from probes.endpoint.types import TokenLogprob


@dataclass
class Step:
    position: int               # index in the continuation
    server_piece: str
    server_id: int
    reference_id: int           # the reference's greedy choice here
    rank: int                   # the server token's rank in the reference distribution (0 = top)
    gap: float                  # reference logprob of its top token minus that of the server's token (nats)
    kl: float | None = None     # KL(server || reference) over the server's top-k set, renormalised
    server_mass: float | None = None      # sum of the server's top-k probabilities
    reference_mass: float | None = None   # the reference's probability mass on the same tokens
    same_top1: bool | None = None          # the server's top-k list is headed by the reference's top token


@dataclass
class Forced:
    prompt_len: int
    steps: list[Step] = field(default_factory=list)
    unmapped: str | None = None            # the first piece the reference vocab cannot produce

    @property
    def agree(self) -> int:
        return sum(1 for s in self.steps if s.server_id == s.reference_id)

    def first_divergence(self) -> Step | None:
        return next((s for s in self.steps if s.server_id != s.reference_id), None)


def candidates(ref, piece: str) -> list[int]:
    if piece == "":
        return sorted({*ref.tokenizer.all_special_ids,
                       *(i for i, t in ref.tokenizer.added_by_id.items() if t.special)})
    return ref.pieces().get(piece, [])


def best(ids: list[int], row: torch.Tensor) -> int:
    return max(ids, key=lambda i: float(row[i])) if len(ids) > 1 else ids[0]


def teacher_force(ref, engine, prompt_ids: list[int], tokens: list[TokenLogprob]) -> Forced:
    """Steps for each server token the reference vocab can express (up to the first one it cannot)."""
    options, pieces, unmapped = [], [], None
    for token in tokens:
        ids = candidates(ref, token.token)
        if not ids:
            unmapped = token.token
            break
        options.append(ids)
        pieces.append(token)
    chosen = [ids[0] for ids in options]
    rows = None
    for _ in range(2):  # pass 2 only when an ambiguous piece resolved to another id
        rows = torch.log_softmax(engine.logits(prompt_ids + chosen).float(), dim=-1)  # [seq, vocab]
        resolved = [best(ids, rows[len(prompt_ids) + t - 1]) for t, ids in enumerate(options)]
        if resolved == chosen:
            break
        chosen = resolved
    forced = Forced(len(prompt_ids), unmapped=unmapped)
    for t, (token, server_id) in enumerate(zip(pieces, chosen)):
        row = rows[len(prompt_ids) + t - 1]
        top = int(torch.argmax(row))
        step = Step(t, token.token, server_id, top, int((row > row[server_id]).sum()),
                    float(row[top] - row[server_id]))
        if token.top:
            compare_top(ref, step, token.top, row)
        forced.steps.append(step)
    return forced


def compare_top(ref, step: Step, top: dict[str, float], row: torch.Tensor) -> None:
    """KL over the server's top-k set, both sides renormalised on it (so truncated or raw logprobs compare)."""
    ids, server_lp = [], []
    for piece, lp in top.items():
        options = candidates(ref, piece)
        if options and lp is not None and math.isfinite(lp):
            ids.append(best(options, row))
            server_lp.append(float(lp))
    if not ids:
        return
    s = torch.tensor(server_lp, dtype=torch.float64)
    r = row[ids].double()
    step.server_mass, step.reference_mass = float(s.exp().sum()), float(r.exp().sum())
    ps, pr = torch.log_softmax(s, 0), torch.log_softmax(r, 0)
    step.kl = max(float((ps.exp() * (ps - pr)).sum()), 0.0)
    step.same_top1 = ids[int(torch.argmax(s))] == int(torch.argmax(row))
