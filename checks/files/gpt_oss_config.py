"""gpt-oss config checks (CFG010-CFG014): the fields only gpt-oss reads, each failure one that gives wrong logits
with no error (sglang#39939: `up + 1` left out; onnxruntime#27221: swiglu_limit defaulting to 0; sinks broken
in attention backends, vllm#28561). These read config.json (CFG013 also the sinks' header shapes); a finding
names the field.
"""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key

GPT_OSS = "GptOssForCausalLM"
LAYER_KINDS = ("sliding_attention", "full_attention")
RELEASED_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                 "original_max_position_embeddings": 4096}


def _gpt_oss(ctx) -> dict:
    if ctx.config.architecture != GPT_OSS:
        raise Skip("not a gpt-oss model")
    return ctx.raw_config



def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@check("CFG010", category="config", severity="error", needs=("config",),
       hint="Set swiglu_limit to the trained clamp (7.0 in gpt-oss-20b/120b) and swiglu_alpha to 1.702.")
def swiglu_limit_set(ctx):
    """gpt-oss's clamped SwiGLU has a positive `swiglu_limit` and `swiglu_alpha`.

    The experts compute `(clamp(up, -L, L) + 1) * g * sigmoid(alpha * g)` with `g = min(gate, L)`. A limit of 0
    throws away every up value and every positive gate: the experts keep a sliver of their function and the
    model talks nonsense with no error (onnxruntime#27221, where a missing field defaulted to 0). transformers
    defaults a missing limit to 7.0; a runtime that defaults it differently disagrees silently, so a missing
    field is a warning (null is an error: transformers' clamp fails on it). `swiglu_alpha` may be absent (the
    released configs leave it out; every runtime hard-codes 1.702), but when set it must be positive.

    Remedy: copy swiglu_limit (7.0) and swiglu_alpha (1.702) from the original config.json.
    """
    raw = _gpt_oss(ctx)
    for key, default in (("swiglu_limit", 7.0), ("swiglu_alpha", 1.702)):
        value = raw.get(key)
        if key not in raw and key == "swiglu_alpha":
            continue                # the released configs leave it out: 1.702 is hard-coded in every runtime
        if key not in raw:
            yield Problem(f"{key} is missing: transformers uses {default}, other runtimes may use 0 or no clamp",
                          severity="warning", evidence={key: None, "transformers_default": default},
                          location=config_key(key))
        elif not _number(value) or not value > 0:
            yield Problem(f"{key} = {value!r}: it must be a positive number", evidence={key: value},
                          location=config_key(key))


@check("CFG011", category="config", severity="error", needs=("config",),
       hint="Give layer_types one entry per layer ('sliding_attention' or 'full_attention', alternating in the "
            "released models) and sliding_window the trained window (128).")
def gpt_oss_layer_types(ctx):
    """gpt-oss's `layer_types` lists one known attention kind per layer and the window they need is set.

    gpt-oss alternates a 128-token sliding window with full attention. transformers picks each layer's mask
    from `layer_types`; a list of the wrong length, an unknown kind, or sliding layers without a
    `sliding_window` makes engines disagree about which layers see the whole context, which only shows
    past the window.

    Remedy: restore layer_types and sliding_window from the original config.json.
    """
    raw = _gpt_oss(ctx)
    n, types, window = ctx.config.num_hidden_layers, raw.get("layer_types"), raw.get("sliding_window")
    if types is None:
        return
    if not isinstance(types, list):
        yield Problem(f"layer_types must be a list, found {type(types).__name__}", evidence={"layer_types": types},
                      location=config_key("layer_types"))
        return
    if len(types) != n:
        yield Problem(f"layer_types has {len(types)} entries for num_hidden_layers {n}",
                      evidence={"layer_types": len(types), "num_hidden_layers": n}, location=config_key("layer_types"))
    unknown = sorted({repr(t) for t in types if t not in LAYER_KINDS})
    if unknown:
        yield Problem(f"layer_types holds {', '.join(unknown)}: gpt-oss layers are "
                      f"{' or '.join(LAYER_KINDS)}", evidence={"unknown": unknown}, location=config_key("layer_types"))
    if "sliding_attention" in types and not (_count(window) and window > 0):
        yield Problem(f"layer_types has sliding_attention layers but sliding_window is {window!r}",
                      evidence={"sliding_window": window}, location=config_key("sliding_window"))


@check("CFG012", category="config", severity="error", needs=("config",),
       hint="Set num_local_experts to the number of stored experts and num_experts_per_tok (and the original "
            "experts_per_token, when present) to the trained top-k (4).")
def gpt_oss_experts(ctx):
    """gpt-oss's expert count and top-k are set, consistent, and agree with each other.

    The router picks `num_experts_per_tok` of `num_local_experts` experts and softmaxes only their logits.
    OpenAI's config also carries the original `experts_per_token`; a copy edited in one place only routes
    differently depending on which name a runtime reads.

    Remedy: restore both fields from the original config.json.
    """
    raw = _gpt_oss(ctx)
    experts = raw.get("num_local_experts")
    if not (_count(experts) and experts > 0):
        yield Problem(f"num_local_experts = {experts!r}: it must be a positive integer",
                      evidence={"num_local_experts": experts}, location=config_key("num_local_experts"))
        experts = None
    set_k = {k: raw[k] for k in ("num_experts_per_tok", "experts_per_token") if raw.get(k) is not None}
    for key, k in set_k.items():
        if not (_count(k) and k > 0) or (experts is not None and k > experts):
            yield Problem(f"{key} = {k!r}: it must be an integer from 1 to num_local_experts ({experts})",
                          evidence={key: k, "num_local_experts": experts}, location=config_key(key))
    if len(set(map(repr, set_k.values()))) > 1:
        yield Problem(f"num_experts_per_tok ({set_k['num_experts_per_tok']}) and experts_per_token "
                      f"({set_k['experts_per_token']}) disagree", evidence=set_k,
                      location=config_key("experts_per_token"))


@check("CFG013", category="config", severity="error", needs=("config", "weights"),
       hint="Store self_attn.sinks as one float per attention head ([num_attention_heads]); re-export the layer.")
def gpt_oss_sinks(ctx):
    """Every gpt-oss layer stores its attention sinks as one logit per query head.

    The sink of head h joins that head's softmax (`softmax([scores, sink_h])`, then dropped): shaped
    per kv-head, per layer, or missing, the sinks are either refused by the loader or broadcast to the
    wrong heads by a lenient one (vllm#28561, #28660: sinks broken in attention backends).

    Remedy: re-export the checkpoint; sinks are [num_attention_heads] per layer.
    """
    _gpt_oss(ctx)
    heads, weights = ctx.config.num_attention_heads, ctx.weights
    for i in range(ctx.config.num_hidden_layers):
        name = f"model.layers.{i}.self_attn.sinks"
        if name not in weights:
            yield Problem(f"{name} is missing: layer {i} has no attention sinks",
                          evidence={"tensor": name, "num_attention_heads": heads},
                          location=config_key("num_attention_heads"))
            continue
        shape = list(weights.info(name).shape)
        if shape != [heads]:
            yield Problem(f"{name} has shape {shape}, expected [{heads}] (one sink per head: num_attention_heads)",
                          evidence={"tensor": name, "shape": shape, "num_attention_heads": heads},
                          location=config_key("num_attention_heads"))


@check("CFG014", category="config", severity="warning", needs=("config",),
       hint="Copy the rope_scaling block of the released config (yarn, factor 32, original 4096, beta_fast 32, "
            "beta_slow 1, truncate false).")
def gpt_oss_yarn(ctx):
    """gpt-oss's RoPE block is the YaRN it was trained with, spelled so every runtime reads it the same way.

    Without a rope_scaling/rope_parameters block transformers' GptOssConfig silently applies YaRN (factor 32,
    original 4096) while runtimes that read the file run plain RoPE; without `truncate` transformers
    rounds the YaRN correction range (its default, true) while gpt-oss was trained without rounding. Either
    way positions agree at the start of a sequence and drift apart further on.

    Remedy: write the released block out in full.
    """
    raw = _gpt_oss(ctx)
    block_key = "rope_scaling" if isinstance(raw.get("rope_scaling"), dict) else "rope_parameters"
    block = raw.get(block_key)
    if not isinstance(block, dict):
        yield Problem("no rope_scaling block: transformers applies YaRN (factor 32, original 4096), runtimes that "
                      "read the file run plain RoPE", evidence={"released": RELEASED_ROPE},
                      location=config_key("rope_scaling"))
        return
    kind = block.get("rope_type", block.get("type"))
    if kind != "yarn":
        yield Problem(f"{block_key}.rope_type is {kind!r}; gpt-oss was trained with yarn",
                      evidence={"rope_type": kind}, location=config_key(f"{block_key}.rope_type"))
    elif "truncate" not in block:
        yield Problem(f"{block_key}.truncate is missing: transformers rounds the YaRN correction range "
                      f"(truncate true), gpt-oss was trained with truncate false",
                      evidence={"truncate": None}, location=config_key(f"{block_key}.truncate"))
