"""The one greedy completion of a passage that EPT043 and EPT045 read: asked once, kept with the server's own
`timings` (llama.cpp says there how many tokens a draft proposed and how many were accepted), and replayed through
the reference engine (teacher forcing) so every generated position is compared, after a first divergence too."""
from __future__ import annotations

from checks.endpoint.inputs import EndpointInputs
from checks.endpoint.teacher import Forced, teacher_force
from checks.catalogue.registry import Skip
from probes.endpoint.openai_api import parse_completion
from probes.endpoint.types import Generation

# ~70 tokens of plain prose, then 48 generated: long enough that a quantized KV cache is read over a distance
PASSAGE = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
           "movable metal type, oil-based ink and a wooden press adapted from those used for wine. Books became "
           "cheaper, literacy spread across Europe, and scholars could share exact copies of their work. "
           "Over the following centuries the press changed science, religion and politics, because")
CONTINUATION = 48


def passage_answer(ctx: EndpointInputs) -> tuple[Generation, dict]:
    """The server's greedy continuation of PASSAGE with top logprobs, and its `timings` ({} when it sends none)."""
    def ask():
        surface = ctx.surface
        body = {"prompt": PASSAGE, "max_tokens": CONTINUATION, "temperature": 0.0, "stream": False,
                "logprobs": ctx.top_logprobs, **surface.greedy_extra()}
        if surface.model:
            body["model"] = surface.model
        raw = surface.client.post("/v1/completions", body)
        timings = raw.get("timings") if isinstance(raw, dict) else None
        return parse_completion(raw), timings if isinstance(timings, dict) else {}
    return ctx.ask("serving:passage", ask)


def forced_passage(ctx: EndpointInputs) -> Forced:
    """The passage as the server tokenized it (its tokenize route, else ours when the counts agree), followed by
    the server's greedy tokens, through the reference engine; Skip where the two cannot be lined up."""
    if "serving:forced" in ctx.state:
        return ctx.state["serving:forced"]
    answer, _ = passage_answer(ctx)
    if not answer.tokens:
        raise Skip("the server returned no per-token logprobs for the completion request")
    prompt = ctx.tokenize(PASSAGE)
    if prompt is None:
        prompt = ctx.reference.prompt_ids(PASSAGE)
        if answer.prompt_tokens is not None and answer.prompt_tokens != len(prompt):
            raise Skip(f"the server's prompt has {answer.prompt_tokens} tokens, the reference's {len(prompt)}, and "
                       f"the server cannot tokenize: the same input cannot be replayed (see EPT013)")
    forced = teacher_force(ctx.reference, ctx.engine(), prompt, answer.tokens)
    if not forced.steps:
        raise Skip(f"the server's first token {forced.unmapped!r} is not in the reference vocabulary")
    ctx.state["serving:forced"] = forced
    return forced
