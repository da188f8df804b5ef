"""Diff section 1, files and config: architecture and rope fields, special ids, generation_config, the chat
template rendered on the conversations that exercise its branches, added tokens. Each difference is one finding."""
from __future__ import annotations

import math

from checks.shared.chat.conversations import BRANCHES, default_system_dropped, label, render_all
from checks.diff.text import unified
from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key
from findings import Location

# fields that change what the forward pass computes (compared on the parsed config, defaults filled in)
COMPUTE_FIELDS = ("architecture", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
                  "rope_scaling", "max_position_embeddings", "tie_word_embeddings", "attention_bias", "qk_norm",
                  "sliding_window")
SPECIAL_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")
# raw keys that never change the numbers (bookkeeping of the writer)
COSMETIC = {"transformers_version", "_name_or_path", "torch_dtype", "dtype", "use_cache", "initializer_range",
            "architectures", "model_type", "_attn_implementation_autoset"}
F32_REL = 2 ** -23              # one float32 ulp, relative
GENERATION_BEHAVIOUR = ("eos_token_id", "bos_token_id", "pad_token_id")


def _same(a, b) -> bool:
    """Equal, floats within float32 rounding (GGUF stores rms_norm_eps, rope_theta as float32)."""
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=F32_REL, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    return a == b


def same_rope(ref, cand) -> bool:
    """The two configs rotate alike: the same rope_scaling, or blocks written differently that give the same
    inverse frequencies and attention factor (Llama 3.1's rope_scaling llama3 vs the GGUF's rope_freqs factors).
    Dynamic NTK and LongRoPE change with the length, so those compare by their blocks only."""
    if _same(ref.rope_scaling, cand.rope_scaling):
        return True
    import torch
    from reference_engine.core.rope import inverse_frequencies, rope_parameters
    try:
        if {rope_parameters(c)["rope_type"] for c in (ref, cand)} & {"dynamic", "longrope"}:
            return False
        (a, scale_a), (b, scale_b) = inverse_frequencies(ref), inverse_frequencies(cand)
    except Exception:   # a block the engine refuses is a difference, reported as such
        return False
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=0) and math.isclose(scale_a, scale_b,
                                                                                             rel_tol=1e-6)


@check("DIF001", category="diff", severity="warning", needs=("pair",),
       hint="Make the candidate's config.json (or GGUF metadata) match the reference, or confirm the change is meant.")
def config_fields_differ(ctx):
    """The two models' configs differ in a field that changes the computation (architecture, sizes, rope).

    A conversion that drops rope_scaling, rounds rms_norm_eps or changes max_position_embeddings yields a model
    that loads and runs but computes something else; llama.cpp and transformers then disagree without any
    error. Each differing field is one warning; keys that only record the writer (transformers_version,
    torch_dtype, ...) and other non-computational keys are reported as info."""
    ref, cand = ctx.ref.config, ctx.cand.config
    for name in COMPUTE_FIELDS:
        a, b = getattr(ref, name, None), getattr(cand, name, None)
        if not (same_rope(ref, cand) if name == "rope_scaling" else _same(a, b)):
            yield Problem(f"config {name}: reference {a!r}, candidate {b!r}",
                          evidence={"field": name, "reference": a, "candidate": b},
                          location=config_key(name))
    raw_a, raw_b = ctx.ref.raw_config, ctx.cand.raw_config
    known = set(COMPUTE_FIELDS) | set(SPECIAL_FIELDS)
    for key in sorted(set(raw_a) | set(raw_b)):
        if key in known or key in COSMETIC or _same(raw_a.get(key), raw_b.get(key)):
            continue
        where = ("only in the reference" if key not in raw_b else "only in the candidate" if key not in raw_a
                 else f"reference {raw_a[key]!r}, candidate {raw_b[key]!r}")
        yield Problem(f"config.json key {key}: {where}", severity="info",
                      evidence={"key": key, "reference": raw_a.get(key), "candidate": raw_b.get(key)},
                      location=config_key(key))


def _special_ids(side) -> dict:
    out = {f"config.{k}": getattr(side.config, k, None) for k in SPECIAL_FIELDS}
    try:
        tok = side.tokenizer
        out.update({"tokenizer.bos_token_id": tok.bos_token_id, "tokenizer.eos_token_id": tok.eos_token_id,
                    "tokenizer.pad_token_id": tok.pad_token_id})
    except Exception:  # a side without a tokenizer: the config ids are still compared
        pass
    return out


@check("DIF002", category="diff", severity="warning", needs=("pair",),
       hint="Copy the reference's special token ids (config, tokenizer_config, generation_config) to the candidate.")
def special_ids_differ(ctx):
    """Special token ids (BOS, EOS, PAD) differ between the models.

    A different EOS id is the classic "never stops" / "stops immediately" after a conversion; a different BOS
    id changes every prompt's first token. Each differing id, from the config or the tokenizer, is one warning."""
    a, b = _special_ids(ctx.ref), _special_ids(ctx.cand)
    for key in a:
        if key in b and not _same(a[key], b[key]):
            yield Problem(f"{key}: reference {a[key]!r}, candidate {b[key]!r}",
                          evidence={"field": key, "reference": a[key], "candidate": b[key]},
                          location=_special_location(key))


@check("DIF003", category="diff", severity="warning", needs=("pair",),
       hint="Carry generation_config.json over with the checkpoint (GGUF keeps only the token ids).")
def generation_config_differs(ctx):
    """generation_config differs: a different stop id is a warning, changed sampling defaults are info.

    Serving stacks read their default stop tokens and sampling settings from generation_config.json; a
    converted or re-saved checkpoint that loses or changes it generates differently from the same weights."""
    a, b = ctx.ref.generation_config, ctx.cand.generation_config
    if a is None and b is None:
        raise Skip("neither side has a generation_config.json")
    if a is None or b is None:
        missing = "reference" if a is None else "candidate"
        yield Problem(f"generation_config.json only on one side (missing in the {missing})", severity="info",
                      evidence={"missing_in": missing}, location=Location(file="generation_config.json"))
        return
    raw_a, raw_b = a.raw, b.raw
    for key in sorted(set(raw_a) | set(raw_b)):
        if key == "transformers_version" or _same(raw_a.get(key), raw_b.get(key)):
            continue
        yield Problem(f"generation_config {key}: reference {raw_a.get(key)!r}, candidate {raw_b.get(key)!r}",
                      severity="warning" if key in GENERATION_BEHAVIOUR else "info",
                      evidence={"key": key, "reference": raw_a.get(key), "candidate": raw_b.get(key)},
                      location=Location(file="generation_config.json", logical=key))


def _special_location(key: str) -> Location:
    """'config.eos_token_id' -> config.json's eos_token_id; 'tokenizer.eos_token_id' -> tokenizer_config.json's
    eos_token."""
    source, _, name = key.partition(".")
    if source == "tokenizer":
        return Location(file="tokenizer_config.json", logical=name.removesuffix("_id"))
    return config_key(name)


@check("DIF004", category="diff", severity="warning", needs=("pair",),
       hint="Ship the reference's chat template with the candidate (tokenizer_config.json / tokenizer.chat_template).")
def chat_template_differs(ctx):
    """The chat template renders a conversation differently (text and ids shown as a diff).

    Instruct models are tuned on one exact prompt format; a template that lost a newline, a system prompt or
    the generation prompt costs quality silently. A template bug usually lives in one branch, so both sides
    render every conversation of checks/shared/chat/conversations.py (no system message, a system message,
    one turn, several turns), each with and without the generation prompt: a template that dropped its
    default system turn differs only where the conversation brings none. The first differing rendering is
    shown as a text diff with its token ids (each side's tokenizer)."""
    tok_a, tok_b = ctx.ref.tokenizer, ctx.cand.tokenizer
    has_a, has_b = bool(getattr(tok_a, "chat_template", None)), bool(getattr(tok_b, "chat_template", None))
    if not has_a and not has_b:
        raise Skip("neither side has a chat template")
    if not has_a or not has_b:
        missing = "reference" if not has_a else "candidate"
        rendered = render_all(tok_b if not has_a else tok_a)[next(iter(BRANCHES)), True]
        yield Problem(f"chat template only on one side (missing in the {missing})",
                      evidence={"missing_in": missing, "rendered": rendered})
        return
    ref, cand = render_all(tok_a), render_all(tok_b)
    ids = {}
    for case in ref:
        if ref[case] != cand[case]:
            continue
        ids[case] = (tok_a.encode(ref[case], add_special_tokens=False),
                     tok_b.encode(cand[case], add_special_tokens=False))
    differing = [case for case in ref if ref[case] != cand[case] or ids[case][0] != ids[case][1]]
    if not differing:
        return
    case = differing[0]
    text_a, text_b = ref[case], cand[case]
    ids_a, ids_b = ids.get(case) or (tok_a.encode(text_a, add_special_tokens=False),
                                     tok_b.encode(text_b, add_special_tokens=False))
    first = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))
    what = "text" if text_a != text_b else "token ids (same text)"
    names = {name for name, _ in ref}
    note = ""
    if default_system_dropped({name for name, _ in differing}, names, ref["no system", True]):
        note = ("; only conversations without a system message differ, and the reference template writes a "
                "default system turn there: the candidate's template drops it")
    yield Problem(f"chat template renders {len(differing)} of {len(ref)} conversations differently; first: "
                  f"{label(case)}, a different {what} from id {first} ({len(ids_a)} vs {len(ids_b)} ids){note}",
                  evidence={"conversation": label(case), "differing": [label(c) for c in differing],
                            "text_diff": unified(text_a, text_b, "reference", "candidate"),
                            "first_differing_id": first,
                            "reference_ids": ids_a[max(first - 4, 0):first + 12],
                            "candidate_ids": ids_b[max(first - 4, 0):first + 12],
                            "reference_text": text_a, "candidate_text": text_b},
                  location=Location(file="tokenizer_config.json", logical="chat_template"))


@check("DIF005", category="diff", severity="warning", needs=("pair",),
       hint="Make the added/special tokens of both tokenizers identical (content, id, special flag).")
def added_tokens_differ(ctx):
    """Added tokens differ: a token only on one side, another id, or another `special` flag.

    An added token that moved id or lost its special flag is split into pieces by one tokenizer and kept whole
    by the other, so chat markers stop working."""
    a = {t.content: t for t in ctx.ref.tokenizer.added_tokens}
    b = {t.content: t for t in ctx.cand.tokenizer.added_tokens}
    for content in [c for c in a if c not in b][:20]:
        yield Problem(f"added token {content!r} (id {a[content].id}) only in the reference",
                      evidence={"token": content, "reference_id": a[content].id},
                      location=Location(file="tokenizer.json", logical="added_tokens"))
    for content in [c for c in b if c not in a][:20]:
        yield Problem(f"added token {content!r} (id {b[content].id}) only in the candidate",
                      evidence={"token": content, "candidate_id": b[content].id},
                      location=Location(file="tokenizer.json", logical="added_tokens"))
    for content in [c for c in a if c in b][:2000]:
        x, y = a[content], b[content]
        if x.id != y.id or x.special != y.special:
            yield Problem(f"added token {content!r}: reference id {x.id} special={x.special}, candidate id {y.id} "
                          f"special={y.special}", evidence={"token": content, "reference": [x.id, x.special],
                                                             "candidate": [y.id, y.special]},
                          location=Location(file="tokenizer.json", logical="added_tokens"))
