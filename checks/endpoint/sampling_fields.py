"""EPT032: the request's sampling fields, and their absence, mean what the OpenAI API says: a field a request leaves
out is neutral (top_p 1, no top-k, min-p or repetition penalty), not the model's generation_config.json."""
from __future__ import annotations

from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.endpoint.settings import model_defaults
from checks.catalogue.registry import Problem, Skip, check
from findings import Location
from probes.endpoint import openai_api

PROMPT = [{"role": "user", "content": "Write a short poem about the sea and the wind."}]
SEED = 1234
TOKENS = 16
# what each field means when a request leaves it out (the OpenAI API; top_k and the others: off)
NEUTRAL = {"top_p": 1.0, "top_k": 0.0, "min_p": 0.0, "repetition_penalty": 1.0}


def _answer(ctx: EndpointInputs, fields: dict, key: str) -> str:
    surface = ctx.surface
    return ctx.ask(f"sampling-fields:{key}", lambda: openai_api.chat(
        surface.client, surface.model, PROMPT, max_tokens=TOKENS, extra=fields).text)


def _set_by_model(ctx: EndpointInputs) -> dict[str, float]:
    """The fields generation_config.json sets to something other than their neutral value."""
    values, explicit = model_defaults(ctx.reference)
    return {k: values[k] for k in sorted(explicit & NEUTRAL.keys())
            if not (k == "top_k" and values[k] <= 0) and abs(values[k] - NEUTRAL[k]) > 1e-6}


@check("EPT032", category="endpoint", severity="warning", needs=("endpoint", "config"),
       hint="send every sampling field in each request, or start vLLM with --generation-config vllm (its default "
            "`auto` makes generation_config.json's sampling fields the defaults of every request that leaves them "
            "out)")
@asks_server
def sampling_fields_honoured(ctx: EndpointInputs):
    """A request that leaves the sampling fields out is sampled as one that sets them neutral.

    The same prompt and seed at temperature 0 and 1, once with only temperature and seed (an OpenAI client's
    request) and once with the server's neutral fields spelled out (top_p 1, top-k and min-p off, repetition
    penalty 1): the answers must be the same. They differ when the server fills the fields a request leaves out
    from defaults of its own, as vLLM does by default from generation_config.json (--generation-config auto):
    a client that asked for temperature 1 gets the model card's top_k / top_p, and a repetition_penalty changes
    even greedy answers. The fields generation_config.json sets are named (warning); answers that differ while
    generation_config.json sets none are the server's own defaults (information: EPT031 compares those where the
    server publishes them). A server whose samples change under the same seed is skipped (nothing to compare)."""
    neutral = ctx.surface.greedy_extra()
    if not neutral:
        raise Skip(f"the {ctx.surface.label} has no sampling fields beyond temperature to spell out")
    rows = []
    for temperature in (0.0, 1.0):
        base = {"temperature": temperature, "seed": SEED}
        explicit = _answer(ctx, {**neutral, **base}, f"explicit:{temperature}")
        if temperature and _answer(ctx, {**neutral, **base}, f"explicit-again:{temperature}") != explicit:
            raise Skip("two requests with the same seed were sampled differently: the server's sampling is not "
                       "reproducible under a seed, nothing to compare")
        plain = _answer(ctx, base, f"plain:{temperature}")
        rows.append({"temperature": temperature, "fields_left_out": sorted(neutral), "left_out": plain,
                     "spelled_out": explicit, "same": plain == explicit})
    evidence = {"seed": SEED, "max_tokens": TOKENS, "answers": rows, "generation_config": _set_by_model(ctx)}
    differ = [r for r in rows if not r["same"]]
    if not differ:
        yield Problem(f"a request that leaves {', '.join(sorted(neutral))} out is sampled as one that sets them "
                      f"neutral (temperature 0 and 1, seed {SEED})", severity="info", evidence=evidence, hint="")
        return
    model = evidence["generation_config"]
    at = " and ".join(f"{r['temperature']:g}" for r in differ)
    left_out = ", ".join(sorted(neutral))
    if not model:       # the server's own defaults (llama.cpp's top_k 40 ...): EPT031 lists them where published
        yield Problem(f"a request that leaves {left_out} out is sampled with the server's own defaults (at "
                      f"temperature {at} the answer differs from the same request with them set neutral); "
                      f"generation_config.json sets none of them", severity="info", evidence=evidence, hint="")
        return
    named = ", ".join(f"{k} {v:g}" for k, v in model.items())
    yield Problem(f"the server did not honour the sampling fields a request left out ({left_out}): at temperature "
                  f"{at} the answer differs from the same request with them set neutral: generation_config.json "
                  f"sets {named}, which the server applies to requests that do not set them", evidence=evidence,
                  location=Location(file="generation_config.json", logical=next(iter(model))))
