"""EPT04x: the server's greedy tokens and logprobs vs the reference engine on the same prompt ids."""
from __future__ import annotations

from checks.endpoint.inputs import COMPLETION_PROMPT, EndpointInputs, asks_server
from checks.endpoint.teacher import Forced, teacher_force
from checks.catalogue.registry import Problem, Skip, check

TOP_K = 5             # a server token outside the reference's top 5 at a divergence is not drift
BUG_GAP_NATS = 5.0    # nor is one the reference puts this far behind its choice
DRIFT_AGREEMENT = 0.9
KL_DRIFT, KL_BUG = 0.05, 1.0


def forced_completion(ctx: EndpointInputs) -> Forced:
    """The completion prompt as the server tokenized it (its tokenize route, else ours when the counts agree),
    followed by the server's greedy tokens, through the reference engine."""
    if "forced" in ctx.state:
        return ctx.state["forced"]
    ref = ctx.reference
    answer = ctx.completion_answer()
    if not answer.tokens:
        raise Skip("the server returned no per-token logprobs for the completion request")
    prompt = ctx.tokenize(COMPLETION_PROMPT)
    if prompt is None:
        prompt = ref.prompt_ids(COMPLETION_PROMPT)
        if answer.prompt_tokens is not None and answer.prompt_tokens != len(prompt):
            raise Skip(f"the server's prompt has {answer.prompt_tokens} tokens, the reference's {len(prompt)}, and "
                       f"the server cannot tokenize: the same input cannot be replayed (see EPT013)")
    forced = teacher_force(ref, ctx.engine(), prompt, answer.tokens)
    if not forced.steps:
        raise Skip(f"the server's first token {forced.unmapped!r} is not in the reference vocabulary")
    ctx.state["forced"] = forced
    return forced


@check("EPT041", category="endpoint", severity="error", needs=("endpoint", "tokenizer", "engine"),
       hint="drift: expected from quantization or other kernels; a bug: check the served weights, dtype and rope")
@asks_server
def greedy_tokens(ctx: EndpointInputs):
    """Greedy continuation compared token by token with the reference, on the server's own prompt ids.

    The server's temperature-0 continuation is replayed through the reference engine (teacher forcing), so every
    position is compared even after a first divergence. Divergences where the server's token is a close
    runner-up in the reference are numeric drift (quantization, other kernels), reported as drift. A server
    token the reference ranks far down, or agreement below half, means a different or broken model."""
    forced = forced_completion(ctx)
    steps, first = forced.steps, forced.first_divergence()
    ratio = forced.agree / len(steps)
    evidence = {"prompt": COMPLETION_PROMPT, "compared_tokens": len(steps), "same_greedy_token": forced.agree,
                "agreement": round(ratio, 4), "unmapped_piece": forced.unmapped,
                "steps": [{"t": s.position, "server": s.server_piece, "server_id": s.server_id,
                           "reference_id": s.reference_id, "rank": s.rank, "gap_nats": round(s.gap, 4)}
                          for s in steps]}
    if first is None:
        yield Problem(f"greedy continuation matches the reference token for token ({len(steps)}/{len(steps)})",
                      severity="info", evidence=evidence)
        return
    divergent = [s for s in steps if s.server_id != s.reference_id]
    worst = max(divergent, key=lambda s: s.gap)
    at = (f"first divergence at token {first.position}: the server's {first.server_piece!r} is the reference's "
          f"#{first.rank + 1} ({first.gap:.2f} nats behind)")
    if worst.rank >= TOP_K or worst.gap > BUG_GAP_NATS or ratio < 0.5:
        yield Problem(f"the server's greedy tokens are not this model's: {forced.agree}/{len(steps)} agree; worst: "
                      f"{worst.server_piece!r} is the reference's #{worst.rank + 1} ({worst.gap:.2f} nats behind)",
                      evidence=evidence)
        return
    yield Problem(f"numeric drift: {forced.agree}/{len(steps)} greedy tokens agree; {at}; every divergence is a close "
                  f"runner-up in the reference (quantization or kernel differences, not a wrong model)",
                  severity="warning" if ratio < DRIFT_AGREEMENT else "info", evidence=evidence)


@check("EPT042", category="endpoint", severity="error", needs=("endpoint", "tokenizer", "engine"),
       hint="a large KL with agreeing prompts means other weights or numerics; small KL is quantization drift")
@asks_server
def logprob_agreement(ctx: EndpointInputs):
    """Logprobs vs the reference: KL on the server's top-k and the same-top-1 rate.

    Servers report logprobs of the raw logits (vLLM V1's default, llama-cpp-python) or of the processed
    distribution (after temperature / top-k / top-p: llama.cpp's post-sampling probs). Both sides are
    renormalised on the server's top-k set, and a processed distribution (top-k mass ~1 where the reference's
    mass on the same tokens is lower) is said so in the finding."""
    forced = forced_completion(ctx)
    scored = [s for s in forced.steps if s.kl is not None]
    if not scored:
        raise Skip("the server returned no top logprobs")
    mean_kl = sum(s.kl for s in scored) / len(scored)
    same = sum(1 for s in scored if s.same_top1) / len(scored)
    server_mass = sum(s.server_mass for s in scored) / len(scored)
    ref_mass = sum(s.reference_mass for s in scored) / len(scored)
    processed = server_mass > 0.995 and ref_mass < 0.95
    caveat = ("; the server's logprobs look processed (top-k mass 1.00 where the reference has "
              f"{ref_mass:.2f}): compared renormalised on the returned tokens") if processed else ""
    evidence = {"positions": len(scored), "mean_kl_topk": round(mean_kl, 6),
                "max_kl_topk": round(max(s.kl for s in scored), 6),
                "same_top1_rate": round(same, 4), "server_topk_mass": round(server_mass, 4),
                "reference_mass_on_server_topk": round(ref_mass, 4), "processed_logprobs": processed,
                "per_position_kl": [round(s.kl, 6) for s in scored]}
    summary = f"KL on the server's top-{ctx.top_logprobs} {mean_kl:.4f} nats (mean), same top-1 {same:.0%}"
    if mean_kl > KL_BUG or same < 0.5:
        yield Problem(f"the server's distribution is not this model's: {summary}{caveat}", evidence=evidence)
    elif mean_kl > KL_DRIFT or same < DRIFT_AGREEMENT:
        yield Problem(f"numeric drift: {summary}{caveat} (quantization-sized, not a wrong model)",
                      severity="warning", evidence=evidence)
    else:
        yield Problem(f"logprobs agree with the reference: {summary}{caveat}", severity="info", evidence=evidence)
