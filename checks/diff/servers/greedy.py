"""DIF070: the two servers' greedy answers to the same chat prompts, request by request: the first token where
they part and each side's margin there (a near tie that flipped, or a real difference)."""
from __future__ import annotations

from checks.diff.servers.compare import Divergence, divergence, pieces
from checks.catalogue.registry import Problem, Skip, check
from probes.endpoint import EndpointError

TIE_NATS = 0.5      # both margins within this: a flip between two almost equal tokens (numerics), not a fault


def _row(text: str, ref, cand, found: Divergence | None) -> dict:
    row = {"prompt": text, "reference": ref.text, "candidate": cand.text,
           "tokens": [len(pieces(ref.tokens, ref.text)), len(pieces(cand.tokens, cand.text))],
           "finish_reason": [ref.finish_reason, cand.finish_reason]}
    if found is not None:
        row.update(step=found.step, reference_token=found.ref_piece, candidate_token=found.cand_piece,
                   reference_margin=found.ref_margin.describe(), candidate_margin=found.cand_margin.describe(),
                   common="".join(pieces(ref.tokens, ref.text)[:found.step]))
    return row


def _failed(text: str, ref, cand) -> Problem:
    which = [f"{role}: {answer}" for role, answer in (("reference", ref), ("candidate", cand))
             if isinstance(answer, EndpointError)]
    return Problem(f"{text[:40]!r}: no greedy answer to compare ({'; '.join(which)})",
                   evidence={"prompt": text, "errors": which})


@check("DIF070", category="diff", severity="warning", needs=("servers",),
       hint="A real difference on the first tokens: the servers do not run the same model the same way (weights, "
            "quantization, template, RoPE or sampling settings); DIF072 and `probe endpoint URL --model DIR` on each "
            "say which side is wrong. A near tie is numerics.")
def greedy_agreement(ctx):
    """The two servers' greedy answers part: the first differing token, and each side's margin there.

    Both servers get the same chat prompts (temperature 0, each server's plain-greedy switches, top logprobs).
    At the first token where the answers differ, a side's margin is its logprob of its own pick minus its
    logprob of the other side's pick: both within `DIF070.tie_nats` (0.5) is a near tie that flipped (info),
    anything larger is a real difference (warning). A request one side answers and the other refuses is a
    warning too. Info when every answer is identical."""
    tie = ctx.threshold("DIF070", "tie_nats", TIE_NATS)
    rows, differing, ties = [], 0, 0
    for text, ref, cand in ctx.greedy_pairs():
        if isinstance(ref, EndpointError) or isinstance(cand, EndpointError):
            if isinstance(ref, EndpointError) and isinstance(cand, EndpointError):
                raise Skip(f"neither server answers a greedy chat request: {ref}")
            yield _failed(text, ref, cand)
            continue
        found = divergence(ref.tokens, ref.text, cand.tokens, cand.text)
        rows.append(_row(text, ref, cand, found))
        if found is None:
            continue
        where = (f"{text[:40]!r}: answers part at token {found.step + 1}: reference {found.shown(found.ref_piece)} "
                 f"vs candidate {found.shown(found.cand_piece)} (margins: reference {found.ref_margin.describe()}, "
                 f"candidate {found.cand_margin.describe()})")
        if found.near_tie(tie):
            ties += 1
            yield Problem(f"near tie flipped: {where}", severity="info", evidence=rows[-1])
        else:
            differing += 1
            yield Problem(where, evidence=rows[-1])
    if rows and not differing and not ties:
        yield Problem(f"all {len(rows)} greedy answers are identical token for token", severity="info",
                      evidence={"answers": rows})
