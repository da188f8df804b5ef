"""EPT03x sampling defaults and EPT05x context window: server settings vs the model's files."""
from __future__ import annotations

from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key
from findings import Location

# transformers' GenerationConfig defaults: what "the model's defaults" are when generation_config.json is silent
HF_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 50.0, "min_p": 0.0, "repetition_penalty": 1.0}


def model_defaults(ref) -> tuple[dict[str, float], set[str]]:
    """The model's sampling defaults and which of them generation_config.json sets explicitly."""
    raw = ref.generation.raw if ref.generation is not None else {}
    explicit = {k for k in HF_DEFAULTS if isinstance(raw.get(k), (int, float)) and not isinstance(raw.get(k), bool)}
    values = {k: float(raw[k]) if k in explicit else v for k, v in HF_DEFAULTS.items()}
    if raw.get("do_sample") is False and "temperature" not in explicit:
        values["temperature"] = 0.0   # greedy unless asked otherwise
        explicit.add("temperature")
    return values, explicit


@check("EPT031", category="endpoint", severity="warning", needs=("endpoint", "config"),
       hint="pass the sampling parameters explicitly, or set the server's defaults from generation_config.json")
@asks_server
def sampling_defaults(ctx: EndpointInputs):
    """Sampling defaults: what the server samples with when a request names none, vs generation_config.json.

    A server silently applying its own temperature/top-k/top-p/repetition penalty (or generation_config's
    when the user expected OpenAI's, vLLM #15241) changes every answer that does not set them. Settings the
    model's generation_config.json sets and the server overrides are warnings; differences from transformers'
    defaults where the model sets nothing are listed for information."""
    found = ctx.ask("defaults", lambda: ctx.surface.defaults())
    if found is None:
        raise Skip(f"the {ctx.surface.label} does not expose its default sampling settings")
    model, explicit = model_defaults(ctx.reference)
    diffs = {k: {"server": v, "model": model[k], "explicit_in_generation_config": k in explicit}
             for k, v in found.values.items() if k in model and abs(v - model[k]) > 1e-6}
    evidence = {"server": found.values, "source": found.source, "model": model, "differences": diffs}
    overrides = [k for k, d in diffs.items() if d["explicit_in_generation_config"]]
    if overrides:
        yield Problem("the server's defaults override generation_config.json: " + ", ".join(
            f"{k} {diffs[k]['server']:g} (model {diffs[k]['model']:g})" for k in overrides), evidence=evidence,
            location=Location(file="generation_config.json", logical=overrides[0]))
    elif diffs:
        yield Problem("server sampling defaults (generation_config.json sets none of these): " + ", ".join(
            f"{k} {d['server']:g}" for k, d in diffs.items()), severity="info", evidence=evidence,
            location=Location(file="generation_config.json"))


@check("EPT051", category="endpoint", severity="error", needs=("endpoint", "config"),
       hint="serve at most the trained context unless rope scaling is configured; match rope_theta")
@asks_server
def context_window(ctx: EndpointInputs):
    """Context window and RoPE: the server's maximum context and rope settings vs the model's.

    A window beyond the trained context without rope scaling degrades long prompts silently (vLLM #2565);
    missing rope factors (llama.cpp #8650) or another rope base change every position. Where the server does
    not report its window, an oversize request's error names it."""
    ref = ctx.reference
    model_max = ref.max_context
    server = ctx.ask("context", lambda: ctx.surface.context())
    if server is None or server.max_context is None and not server.rope:
        server = ctx.ask("context_probe", lambda: ctx.surface.probe_context(model_max + 8))
    evidence = {"model_max_context": model_max, "model_rope": ref.rope, "server_max_context": server.max_context,
                "server_rope": server.rope, "source": server.source}
    theta = server.rope.get("freq_base")
    if theta is not None and abs(theta - ref.config.rope_theta) > 1e-6 * ref.config.rope_theta:
        yield Problem(f"the server's rope base {theta:g} differs from the model's rope_theta "
                      f"{ref.config.rope_theta:g}", severity="error", evidence=evidence,
                      location=config_key("rope_theta"))
    scaled = bool(ref.config.rope_scaling) or "scaling.factor" in server.rope
    longest = server.max_context or server.accepted_prompt
    if longest is not None and longest > model_max and not scaled:
        yield Problem(f"the server accepts {longest} tokens, past the model's trained context of {model_max} "
                      f"without rope scaling", severity="warning", evidence=evidence,
                      location=config_key("max_position_embeddings"))
    elif server.max_context is not None:
        relation = "the same as" if server.max_context == model_max else (
            "smaller than" if server.max_context < model_max else "larger than (rope scaling)")
        yield Problem(f"server context window {server.max_context} tokens, {relation} the model's {model_max}",
                      severity="info", evidence=evidence,
                      location=config_key("max_position_embeddings"))
    elif longest is None:
        raise Skip(f"the server does not report its context window ({server.source})")
