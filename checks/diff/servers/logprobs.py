"""DIF071: the KL divergence of the two servers' returned top logprobs, position by position, over the part of
each greedy answer both servers generated from the same context."""
from __future__ import annotations

from checks.diff.servers.compare import first_difference, kl_by_position, pieces
from checks.catalogue.registry import Problem, Skip, check
from probes.endpoint import EndpointError

# mean KL of the top lists: below KLD_WARN the servers differ by numerics (kernels, flash attention, batch shapes);
# above it by what they serve (another quantization, a RoPE setting); above KLD_ERROR they are other models
KLD_WARN, KLD_ERROR = 0.05, 0.5


def _by_prompt(text: str, ref, cand) -> dict | None:
    """Both directions' KL at every shared position of one prompt's answers (None: no comparable position)."""
    upto = first_difference(pieces(ref.tokens, ref.text), pieces(cand.tokens, cand.text))
    forward = [k for k in kl_by_position(ref.tokens, cand.tokens, upto) if k is not None]
    backward = [k for k in kl_by_position(cand.tokens, ref.tokens, upto) if k is not None]
    if not forward or not backward:
        return None
    return {"prompt": text, "positions": len(forward), **_stats(forward, ""), **_stats(backward, "_reversed"),
            "kld_by_position": [round(k, 6) for k in forward],
            "kld_reversed_by_position": [round(k, 6) for k in backward]}


def _stats(values: list[float], suffix: str) -> dict:
    worst = max(range(len(values)), key=values.__getitem__)
    return {f"mean_kld{suffix}": round(sum(values) / len(values), 6), f"max_kld{suffix}": round(values[worst], 6),
            f"max_at{suffix}": worst}


def _mean(rows: list[dict], key: str) -> float:
    return sum(r[key] * r["positions"] for r in rows) / sum(r["positions"] for r in rows)


@check("DIF071", category="diff", severity="error", needs=("servers",),
       hint="Same weights served two ways read a KL near 0 (numerics); a large one means different weights, "
            "quantization or a different prompt: DIF072 and DIF070 narrow it down.")
def top_logprob_kl(ctx):
    """The servers' next-token distributions differ: KL divergence of the returned top logprobs by position.

    At every position both greedy answers reached with the same context (up to and including the first
    differing token), KL(reference || candidate) and KL(candidate || reference), each the least the two top
    lists allow (checks/diff/servers/compare.py top_kl: a lower bound of the full KL). The larger of the two
    means above `DIF071.kld_warn` (0.05) is a warning, above `kld_error` (0.5) an error; below, info with the
    numbers (near-equal). Skipped when a server returns no logprobs."""
    warn, error = ctx.threshold("DIF071", "kld_warn", KLD_WARN), ctx.threshold("DIF071", "kld_error", KLD_ERROR)
    rows = []
    for text, ref, cand in ctx.greedy_pairs():
        if isinstance(ref, EndpointError) or isinstance(cand, EndpointError):
            continue
        if not ref.tokens or not cand.tokens:
            raise Skip(f"the {'reference' if not ref.tokens else 'candidate'} server returned no logprobs")
        row = _by_prompt(text, ref, cand)
        if row is not None:
            rows.append(row)
    if not rows:
        raise Skip("no position where both servers returned comparable top logprobs")
    forward, backward = _mean(rows, "mean_kld"), _mean(rows, "mean_kld_reversed")
    positions = sum(r["positions"] for r in rows)
    peak = max(max(r["max_kld"], r["max_kld_reversed"]) for r in rows)
    evidence = {"positions": positions, "mean_kld": round(forward, 6), "mean_kld_reversed": round(backward, 6),
                "max_kld": peak, "bound": "the least KL the top lists allow (a lower bound)", "by_prompt": rows}
    summary = (f"top-logprob KL mean {forward:.6f} (reference || candidate), {backward:.6f} (candidate || "
               f"reference), max {peak:.6f} over {positions} positions")
    worst = max(forward, backward)
    if worst > error:
        yield Problem(f"{summary}: the servers' distributions differ", evidence=evidence)
    elif worst > warn:
        yield Problem(f"{summary}: above {warn}", severity="warning", evidence=evidence)
    else:
        yield Problem(f"near-equal: {summary}", severity="info", evidence=evidence)
