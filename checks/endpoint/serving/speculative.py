"""EPT045: speculative decoding must not change greedy output. A draft (a draft model, n-gram lookup) only
proposes; the target verifies every proposed token, so at temperature 0 the answer is the target's own. The
server's greedy continuation of the passage is replayed through the reference: a drafted token the target would
not have picked shows as a parting beyond a near tie. llama.cpp says in each answer's `timings` how many tokens
were drafted and accepted; a server that does not say is compared by `llmdoctor diff URL_A URL_B` with a twin
served without speculative decoding."""
from __future__ import annotations

from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.endpoint.chain.parity import NEAR_TIE_NATS
from checks.endpoint.serving.kv_cache import parting
from checks.endpoint.serving.passage import forced_passage, passage_answer
from checks.catalogue.registry import Problem, Skip, check


@check("EPT045", category="endpoint", severity="error", needs=("endpoint", "tokenizer", "engine"),
       hint="speculative decoding must verify every drafted token: drop benchmarking switches (llama-server "
            "--spec-synth-len/--spec-synth-rates accept drafts unverified), serve without the draft to confirm, "
            "and update the server")
@asks_server
def speculative_greedy(ctx: EndpointInputs):
    """Speculative decoding changed the greedy output: a drafted token was kept where the target picks another.

    Read where the server reports its drafts (llama.cpp's `timings.draft_n` / `draft_n_accepted`); the greedy
    continuation of a 70-token passage (48 tokens) is replayed through the reference, and the first position
    whose served token the reference ranks more than 0.5 nats behind its own pick is an error: a verified
    draft cannot put it there. Weights other than the reference's move picks too: give the served GGUF itself
    as --model (EPT041 says how far the weights alone move them). Agreement with drafts accepted is info."""
    _, timings = passage_answer(ctx)
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    if not isinstance(drafted, int) or drafted <= 0:
        raise Skip("the server reports no drafted tokens (llama.cpp's timings.draft_n): speculative decoding is "
                   "off, or the server does not say; compare it with a twin served without it by "
                   "`llmdoctor diff URL_A URL_B`")
    forced = forced_passage(ctx)
    parts = parting(forced)
    evidence = {"draft_n": drafted, "draft_n_accepted": accepted, "same_greedy_token": forced.agree,
                "compared_tokens": len(forced.steps), "parts": parts}
    drafts = f"{accepted} of {drafted} drafted tokens accepted"
    if parts is None:
        yield Problem(f"speculative decoding on ({drafts}); the greedy output is the reference's "
                      f"({forced.agree}/{len(forced.steps)} tokens, any other within a {NEAR_TIE_NATS}-nat near "
                      f"tie)", severity="info", evidence=evidence)
        return
    yield Problem(f"speculative decoding changed the greedy output ({drafts}): at generated token {parts['token']} "
                  f"the server kept {parts['server']!r}, the reference's #{parts['reference_rank']}, "
                  f"{parts['reference_gap_nats']} nats behind the target's own pick; "
                  f"{forced.agree}/{len(forced.steps)} tokens agree", evidence=evidence)
