"""EPT043: the served numbers against the reference by position, the way a quantized KV cache shows (llama-server
`-ctk/-ctv q8_0|q4_0`, vLLM `--kv-cache-dtype fp8`): KL on the server's top-k at every generated position, read in
windows by distance from the prompt's start, greedy agreement, and where the greedy output first parts from the
reference with the reference's own margin there."""
from __future__ import annotations

from checks.endpoint.chain.parity import NEAR_TIE_NATS   # one near tie for every greedy comparison
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.endpoint.serving.passage import PASSAGE, forced_passage
from checks.catalogue.registry import Problem, Skip, check

# Thresholds from SmolLM2-135M Q4_1 on llama-server against its own float32 weights (the test
# tests/checks/endpoint/test_serving_live.py prints them): mean KL over 48 positions 0.0015 with the default f16
# cache, 0.0021 with q8_0, 0.03 with q4_0 (greedy parts at token 1, 0.73 nats from a tie).
KL_NEAR_EQUAL = 0.01        # mean top-k KL (nats) under which the served distribution is the reference's
WINDOW = 16                 # positions per reported window


def windows(forced) -> list[dict]:
    """Mean KL per WINDOW generated positions, each named by its distance from the prompt's first token."""
    out = []
    for start in range(0, len(forced.steps), WINDOW):
        kls = [s.kl for s in forced.steps[start:start + WINDOW] if s.kl is not None]
        if kls:
            out.append({"from_token": forced.prompt_len + start,
                        "to_token": forced.prompt_len + min(start + WINDOW, len(forced.steps)) - 1,
                        "mean_kl": round(sum(kls) / len(kls), 5), "max_kl": round(max(kls), 5)})
    return out


def parting(forced) -> dict | None:
    """The first generated position whose greedy pick the reference does not share beyond a near tie."""
    step = next((s for s in forced.steps if s.server_id != s.reference_id
                 and s.gap >= NEAR_TIE_NATS), None)
    if step is None:
        return None
    return {"token": step.position, "distance": forced.prompt_len + step.position, "server": step.server_piece,
            "reference_rank": step.rank + 1, "reference_gap_nats": round(step.gap, 4)}


@check("EPT043", category="endpoint", severity="warning", needs=("endpoint", "tokenizer", "engine"),
       hint="a quantized KV cache (llama-server -ctk/-ctv q4_0, vLLM --kv-cache-dtype) moves answers: serve with "
            "an f16 or q8_0 cache and rerun; a large KL with an f16 cache means other weights or kernels (EPT041)")
@asks_server
def kv_cache_drift(ctx: EndpointInputs):
    """The served distribution drifts from the reference along a passage, as a quantized KV cache makes it.

    A 70-token passage is continued greedily for 48 tokens; the server's tokens are replayed through the
    reference engine, and at each position the KL on the server's top-k (both sides renormalised on it) and the
    two greedy picks are compared. The KL is reported in windows of 16 positions by their distance from the
    prompt's start, with the position where the greedy output first parts from the reference beyond a near tie
    (0.5 nats). Mean KL under 0.01 nats and no such parting: near-equal (info; an f16 or q8_0 cache on
    SmolLM2). Above it, or a parting: the served numbers are measurably off (warning; a q4_0 cache on SmolLM2
    gives ~0.03 and parts at the first tokens), and where it parts, greedy answers change. Weights other than
    the reference's move the numbers too: give the served GGUF itself as --model to see the cache alone."""
    forced = forced_passage(ctx)
    scored = [s for s in forced.steps if s.kl is not None]
    if not scored:
        raise Skip("the server returned no top logprobs")
    mean_kl = sum(s.kl for s in scored) / len(scored)
    parts = parting(forced)
    evidence = {"prompt": PASSAGE, "prompt_tokens": forced.prompt_len, "positions": len(scored),
                "mean_kl_topk": round(mean_kl, 6), "same_greedy_token": forced.agree,
                "compared_tokens": len(forced.steps), "windows": windows(forced), "parts": parts,
                "per_position_kl": [round(s.kl, 5) for s in scored]}
    summary = (f"mean KL on the server's top-{ctx.top_logprobs} {mean_kl:.4f} nats over {len(scored)} positions, "
               f"{forced.agree}/{len(forced.steps)} greedy tokens the reference's")
    if parts is not None:
        yield Problem(f"greedy output changes: at generated token {parts['token']} ({parts['distance']} tokens "
                      f"from the prompt's start) the server picks {parts['server']!r}, the reference's "
                      f"#{parts['reference_rank']}, {parts['reference_gap_nats']} nats behind its own pick; "
                      f"{summary}", evidence=evidence)
    elif mean_kl > KL_NEAR_EQUAL:
        yield Problem(f"the served distribution is measurably off the reference ({summary}; near-equal is under "
                      f"{KL_NEAR_EQUAL}): greedy answers hold here, longer ones may not", evidence=evidence)
    else:
        yield Problem(f"near-equal to the reference along the passage: {summary}", severity="info",
                      evidence=evidence)
