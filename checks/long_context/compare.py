"""GGF020 and DIF060: the long-context settings of two descriptions of one model, side by side (declared.py):
a GGUF's metadata against the config.json beside it (with none, against itself: gguf_keys.py), and two models
under `llmdoctor diff`."""
from __future__ import annotations

import json
import math
from pathlib import Path

from checks.long_context.declared import Settings, settings
from checks.long_context.conversion import conversion_problems
from checks.long_context.gguf_keys import key_problems
from checks.catalogue.registry import Problem, check

# what DIF001 already compares on the parsed config (rope_theta, rope_scaling, max_position_embeddings,
# sliding_window) is left to it under diff; the GGUF comparison reports everything
DIF001_FIELDS = ("max_position_embeddings", "rope_theta", "rope_type", "rope_factor", "sliding_window")
SCALING_FIELDS = ("rope_type", "rope_factor", "original_max_position_embeddings")


def fields(s: Settings) -> dict:
    """The long-context settings a reader acts on, flat."""
    full, local = s.rope.get("full_attention", {}), s.rope.get("sliding_attention", {})
    return {"max_position_embeddings": s.declared, "rope_theta": full.get("rope_theta"),
            "rope_type": full.get("rope_type"), "rope_factor": full.get("factor"),
            "original_max_position_embeddings": s.original, "sliding_window": s.window,
            "local_rope_theta": local.get("rope_theta"), "attention_chunk_size": s.chunk,
            "layer_types": _pattern(s.layer_types)}


def _pattern(types) -> str | None:
    """layer_types in short: one letter per layer (f full, s sliding, other kinds by their first letter)."""
    if not types:
        return None
    return "".join(str(t)[:1] if t != "full_attention" else "f" for t in types)


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=2 ** -23)      # GGUF stores floats as float32
    return a == b


def differences(a: dict, b: dict, skip=()) -> dict:
    """{field: [a, b]} for fields both sides state and that differ (a field one side leaves out is not compared:
    a GGUF has no layer_types of its own)."""
    return {k: [a[k], b[k]] for k in a if k not in skip and a[k] is not None and b.get(k) is not None
            and not _same(a[k], b[k])}


@check("GGF020", category="config", severity="warning", needs=("gguf",),
       hint="Re-convert from the original config.json (or the one beside the file), or fix the key with gguf's "
            "gguf_set_metadata.py ({arch}.context_length, rope.freq_base, rope.scaling.*, attention.sliding_window).")
def gguf_context_matches_config(ctx):
    """The GGUF's long-context metadata agrees with the config.json beside it, or, with none, with itself and with
    what llama.cpp does with it.

    A GGUF carries its own context length, rope base and scaling and sliding window ({arch}.* keys); llama.cpp
    reads those, not the config. A converter that missed the rope scaling or the window, or a file re-tagged by
    hand, serves a model that reads short prompts and loses long ones (a LongRoPE block or a rope factor lost, a
    window dropped). When the file's folder holds the config.json it was converted from, every field both state is
    compared, and a scaling block the config has is looked for in the file as the converter writes it
    (checks/long_context/conversion.py: keys for yarn and linear with yarn's attention factor read as transformers
    reads it, tensors for llama3 and longrope; llama.cpp#13322, vllm#48621). Without one (the usual download: a
    GGUF alone), the keys are held to each other and to llama.cpp's reading of them: no rope.freq_base (llama.cpp
    takes 10000) or one that is not a positive number; a scaling type llama.cpp does not know (it aborts), linear
    or yarn without a factor (nothing is stretched), longrope without its rope_factors tensors, a factor without a
    type (llama.cpp applies it as linear, other readers do not); a context_length that is neither
    original_context_length nor original x factor, or many times an original_context_length with no scaling at all;
    a sliding window wider than the context, or none where the architecture's layers need one (gemma3, gpt-oss); a
    context_length of 0 (checks/long_context/gguf_keys.py). GGF007, GGF010 and CFG060-063 (which read the config
    rebuilt from the GGUF) report the rest.
    """
    path = Path(ctx.gguf.path)
    beside = path.parent / "config.json"
    raw, unread = None, ""
    if beside.is_file():
        try:
            raw = json.loads(beside.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            unread = f"config.json beside the GGUF cannot be read ({' '.join(str(e).split())[:120]})"
        if raw is not None and not isinstance(raw, dict):
            raw, unread = None, "config.json beside the GGUF is not an object"
    if raw is None:
        if unread:
            yield Problem(f"{unread}: the GGUF's keys are judged on their own", severity="info")
        messages, evidence = key_problems(ctx.gguf)
        for message in messages:
            yield Problem(message, evidence=evidence)
        return
    for message in conversion_problems(raw, ctx.gguf):
        yield Problem(message, evidence={"config_rope": raw.get("rope_scaling") or raw.get("rope_parameters")},
                      hint="Re-convert with a convert_hf_to_gguf.py that writes the model's rope scaling, or set "
                           "{arch}.rope.scaling.* with gguf_set_metadata.py to the config's block.")
    # the scaling itself is read by conversion_problems, as the converter writes it (llama3 as a tensor)
    diff = differences(fields(settings(ctx.raw_config)), fields(settings(raw)), skip=SCALING_FIELDS)
    for name, (gguf, config) in diff.items():
        yield Problem(f"{name}: the GGUF says {gguf!r}, config.json beside it {config!r}",
                      evidence={"field": name, "gguf": gguf, "config": config})


@check("DIF060", category="diff", severity="warning", needs=("pair",),
       hint="Carry the reference's layer pattern, local rope base, original length and chunk size over to the "
            "candidate, or confirm the change is meant (then `check --context N` says how far it reads).")
def context_settings_differ(ctx):
    """The long-context settings DIF001 does not compare differ: the layer pattern, the local rope base, the
    original length, the attention chunk.

    Two models that agree on every size may still read far out differently: a layer_types list with the
    window on other layers, Gemma 3's local rope base, original_max_position_embeddings (where yarn, llama3
    and LongRoPE start to stretch) or a chunked attention's chunk. Each changed field is one warning.
    """
    ref, cand = (fields(settings(side.raw_config)) for side in ctx.sides)
    for name, (a, b) in differences(ref, cand, skip=DIF001_FIELDS).items():
        yield Problem(f"{name} differs: reference {a!r}, candidate {b!r}", evidence={"field": name,
                                                                                  "reference": a, "candidate": b})
