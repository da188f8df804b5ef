"""DIF061: the KL divergence of the two servers' returned top logprobs, position by position, over the part of
each greedy answer both servers generated from the same context."""
from __future__ import annotations

from checks.diff.servers.compare import first_difference, kl_by_position, pieces
from checks.registry import Problem, Skip, check
from probes.endpoint import EndpointError

# mean KL of the top lists: below KLD_WARN the servers differ by numerics (kernels, flash attention, batch shapes);
# above it by what they serve (another quantization, a RoPE setting); above KLD_ERROR they are other models
KLD_WARN, KLD_ERROR = 0.05, 0.5


def _shared_positions(ref, cand) -> list[float | None]:
    upto = first_difference(pieces(ref.tokens, ref.text), pieces(cand.tokens, cand.text))
    return kl_by_position(ref.tokens, cand.tokens, upto)


@check("DIF061", category="diff", severity="error", needs=("servers",),
       hint="Same weights served two ways read a KL near 0 (numerics); a large one means different weights, "
            "quantization or a different prompt: DIF062 and DIF060 narrow it down.")
def top_logprob_kl(ctx):
    """The servers' next-token distributions differ: KL divergence of the returned top logprobs by position.

    At every position both greedy answers reached with the same context (up to and including the first
    differing token), KL(reference || candidate) over {pieces in both top lists} + {rest}: a lower bound of the
    full KL that the top lists allow. Mean above `DIF061.kld_warn` (0.05) is a warning, above `kld_error` (0.5)
    an error; below, info with the numbers (near-equal). Skipped when a server returns no logprobs."""
    warn, error = ctx.threshold("DIF061", "kld_warn", KLD_WARN), ctx.threshold("DIF061", "kld_error", KLD_ERROR)
    rows, values = [], []
    for text, ref, cand in ctx.greedy_pairs():
        if isinstance(ref, EndpointError) or isinstance(cand, EndpointError):
            continue
        if not ref.tokens or not cand.tokens:
            raise Skip(f"the {'reference' if not ref.tokens else 'candidate'} server returned no logprobs")
        kls = [k for k in _shared_positions(ref, cand) if k is not None]
        values.extend(kls)
        if kls:
            worst = max(range(len(kls)), key=kls.__getitem__)
            rows.append({"prompt": text, "positions": len(kls), "mean_kld": round(sum(kls) / len(kls), 6),
                         "max_kld": round(kls[worst], 6), "max_at": worst,
                         "kld_by_position": [round(k, 6) for k in kls]})
    if not values:
        raise Skip("no position where both servers returned comparable top logprobs")
    mean, peak = sum(values) / len(values), max(values)
    evidence = {"positions": len(values), "mean_kld": round(mean, 6), "max_kld": round(peak, 6),
                "bound": "lower bound: KL over the pieces in both top lists + the rest", "by_prompt": rows}
    summary = f"top-logprob KL(reference || candidate) mean {mean:.6f}, max {peak:.6f} over {len(values)} positions"
    if mean > error:
        yield Problem(f"{summary}: the servers' distributions differ", evidence=evidence)
    elif mean > warn:
        yield Problem(f"{summary}: above {warn}", severity="warning", evidence=evidence)
    else:
        yield Problem(f"near-equal: {summary}", severity="info", evidence=evidence)
