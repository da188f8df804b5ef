"""EPT01x: the prompt the server feeds the model vs the reference tokenizer and chat template."""
from __future__ import annotations

from checks.shared.chat.conversations import default_system_dropped
from checks.endpoint.inputs import CONVERSATIONS, RAW_TEXTS, EndpointInputs, asks_server
from checks.endpoint.textdiff import first_difference, rendered_diff, split_spans
from checks.catalogue.registry import Problem, Skip, check
from findings import Location

NEEDS = ("endpoint", "tokenizer")


def leading(ids: list[int], token_id: int | None) -> int:
    n = 0
    while token_id is not None and n < len(ids) and ids[n] == token_id:
        n += 1
    return n


def strip_specials(ctx: EndpointInputs, server: list[int], text: str) -> list[int]:
    """Server ids for `text` without the BOS/EOS its completion path adds, to compare with encode(no specials)."""
    ref = ctx.reference
    plain = ref.tokenizer.encode(text, add_special_tokens=False)
    extra_bos = leading(server, ref.bos_id) - leading(plain, ref.bos_id)
    out = server[max(extra_bos, 0):]
    eos = ref.tokenizer.eos_token_id
    if eos is not None and out[-1:] == [eos] and plain[-1:] != [eos]:
        out = out[:-1]
    return out


ADD_BOS = Location(file="tokenizer_config.json", logical="add_bos_token")   # the add-BOS policy
TEMPLATE = Location(file="tokenizer_config.json", logical="chat_template")
# llama.cpp before ggml-org/llama.cpp#15086 cut a template's leading bos_token text whether or not it adds one back
DEDUP_HINT = ("the server removes the template's leading token as a duplicate BOS but adds none back (llama-server "
              "--jinja before ggml-org/llama.cpp#15086 did so for GLM's [gMASK]): update the server, or make the "
              "GGUF's BOS a token the template does not write")


def head(ref, ids: list[int], n: int = 4) -> str:
    """The first ids with their text, as a finding names them: [1 '<|im_start|>', 9690 'system', ...]."""
    shown = ", ".join(f"{i} {ref.piece(i)!r}" for i in ids[:n])
    return f"[{shown}{', ...' if len(ids) > n else ''}]"


def bos_verdict(ref, ref_ids: list[int], server_ids: list[int], where: str, template_bos: bool = False):
    """Double, extra or missing BOS on `where`, named with the first ids on both sides; template_bos: the chat
    template writes BOS itself (a missing one was then removed by the server, not left out by the tokenizer)."""
    bos = ref.bos_id
    bos_text = ref.tokenizer.bos_token or str(bos)
    r, s = leading(ref_ids, bos), leading(server_ids, bos)
    if s == r:
        return None
    evidence = {"where": where, "bos_id": bos, "reference_leading_bos": r, "server_leading_bos": s,
                "reference_ids_head": ref_ids[:8], "server_ids_head": server_ids[:8]}
    firsts = f"; reference starts {head(ref, ref_ids)}, server {head(ref, server_ids)}"
    if s >= 2:
        return Problem(f"double BOS on {where}: the server's prompt starts with {s} x {bos_text!r} (id {bos}), the "
                       f"reference with {r}{firsts}", evidence=evidence, location=ADD_BOS,
                       hint="the template already writes BOS: stop the server adding one (add_bos_token false in the "
                            "GGUF, add_special_tokens=False for rendered chat prompts)")
    if s > r:
        return Problem(f"extra BOS on {where}: the server adds {bos_text!r} (id {bos}) the reference does not "
                       f"have{firsts}", severity="warning", evidence=evidence, location=ADD_BOS,
                       hint="make the server's add-BOS policy match the tokenizer's (tokenizer.ggml.add_bos_token / "
                            "tokenizer_config add_bos_token)")
    if template_bos:
        return Problem(f"missing BOS on {where}: the template writes {bos_text!r} (id {bos}) and the server's "
                       f"prompt does not start with it{firsts}", evidence=evidence, location=TEMPLATE,
                       hint=DEDUP_HINT)
    return Problem(f"missing BOS on {where}: the reference starts with {bos_text!r} (id {bos}), the server does "
                   f"not{firsts}", evidence=evidence, location=ADD_BOS,
                   hint="the model is trained with BOS and the server drops it: set tokenizer.ggml.add_bos_token "
                        "true in the GGUF (or add_bos_token in tokenizer_config.json), or render it in the template")


def chat_verdict(ref, ref_ids: list[int], served: list[int]):
    """The server's own chat prompt against the template's: a missing BOS where the template writes it was cut
    by the server (a BOS de-duplication that adds none back: GLM's [gMASK])."""
    bos_text = ref.tokenizer.bos_token
    template_bos = bool(bos_text) and ref.render(CONVERSATIONS["no system"]).startswith(bos_text)
    return bos_verdict(ref, ref_ids, served, "the server's chat prompt", template_bos)


@check("EPT011", category="endpoint", severity="error", needs=NEEDS,
       hint="make the server's BOS handling match the model's tokenizer")
@asks_server
def bos_handling(ctx: EndpointInputs):
    """Double, missing or stripped BOS: the server's prompt ids start differently from the reference's.

    The chat template often writes BOS itself; a server that tokenizes the rendered prompt with its own
    add-BOS policy on top feeds the model two (vLLM #16853, llama-cpp-python #1501); a GGUF whose
    add_bos_token is false on a model trained with BOS (Gemma) feeds none and the model repeats itself; a
    server that de-duplicates BOS by cutting the template's first token and adds none back loses it (GLM's
    [gMASK], llama.cpp #15086). Compared on a plain completion prompt, on the rendered chat tokenized by the
    server, and on the server's own chat prompt, through its tokenize route (llama-server /tokenize and
    /apply-template, vLLM /tokenize with messages); without one, by the prompt token count of a plain text."""
    ref = ctx.reference
    if ref.bos_id is None:
        raise Skip("the model has no BOS token")
    text = RAW_TEXTS[0]
    if ctx.tokenize(text) is None:
        yield from counted_bos(ctx, text)
        return
    found = bos_verdict(ref, ref.prompt_ids(text), ctx.tokenize(text), "a completion prompt")
    if found:
        yield found
    if not ref.tokenizer.chat_template:
        return
    name, messages = "no system", CONVERSATIONS["no system"]
    ref_ids, tokenized = ref.chat_ids(messages), ctx.tokenize(ref.render(messages))
    # a client that renders the template itself and sends it to /v1/completions gets the completion path's BOS
    found = bos_verdict(ref, ref_ids, tokenized, "a chat prompt rendered by the client and sent as a completion")
    if found:
        yield found
    served = chat_ids_as_served(ctx, name, messages, tokenized)
    found = served is not None and chat_verdict(ref, ref_ids, served)
    if found:
        yield found


def counted_bos(ctx: EndpointInputs, text: str):
    """Without a tokenize route: one prompt token more than the reference's for a plain text is an extra BOS."""
    ref = ctx.reference
    expected = len(ref.prompt_ids(text))
    count = ctx.ask(f"count:{text}", lambda: ctx.surface.prompt_count(text))
    if count is None:
        raise Skip("the server has no tokenize route and reports no usage.prompt_tokens: its BOS cannot be seen")
    if count == expected + 1:
        yield Problem(f"the server counts {count} prompt tokens for a plain text the reference encodes in "
                      f"{expected}: one extra token, consistent with an extra BOS", severity="warning",
                      evidence={"text": text, "server_prompt_tokens": count, "reference_tokens": expected},
                      location=ADD_BOS)


def chat_ids_as_served(ctx: EndpointInputs, name: str, messages: list[dict], tokenized: list[int]) -> list[int] | None:
    """The ids the chat route feeds: the server's own (vLLM, llama.cpp) or, when it only reports a count, the
    reference rendering as the server tokenizes it, if that count says the chat route adds what tokenize adds."""
    ids = ctx.ask(f"chat_ids:{name}", lambda: ctx.surface.chat_prompt_ids(messages))
    if ids is not None:
        return ids
    count = ctx.ask(f"chat_count:{name}", lambda: ctx.surface.chat_prompt_count(messages))
    return tokenized if count is not None and count == len(tokenized) else None


@check("EPT012", category="endpoint", severity="error", needs=NEEDS,
       hint="serve the model's own chat template (tokenizer_config.json / tokenizer.chat_template), not a built-in one")
@asks_server
def template_drift(ctx: EndpointInputs):
    """Template drift: the chat prompt the server builds differs from the model's own chat template.

    A server that picks a built-in chat format, or a different template, feeds the model turns it was not
    trained on (ollama #6310); a common variant drops the template's default system turn. Where the server
    returns its rendering (llama.cpp /apply-template, vLLM /tokenize with token strings) the diff is shown;
    otherwise the server's prompt token count on three conversation shapes is compared with the reference
    template tokenized by the server."""
    ref = ctx.reference
    if not ref.tokenizer.chat_template:
        raise Skip("the reference model has no chat template")
    rows, diffs = [], []
    for name, messages in CONVERSATIONS.items():
        expected_text = ref.render(messages)
        served_text = ctx.ask(f"render:{name}", lambda m=messages: ctx.surface.render(m))
        if served_text is not None:
            if served_text != expected_text and not bos_apart(ref.tokenizer.bos_token, expected_text, served_text):
                diffs.append({"conversation": name, "diff": rendered_diff(expected_text, served_text),
                              "first_difference": first_difference(expected_text, served_text)})
            continue
        # the same template gives the reference's ids (plus a BOS the server adds: EPT011) or, when the server's
        # tokenizer differs (EPT013/EPT014), the reference rendering as the server tokenizes it
        ref_ids, tokenized = ref.chat_ids(messages), ctx.tokenize(expected_text)
        extra_bos = max(leading(tokenized, ref.bos_id) - leading(ref_ids, ref.bos_id), 0) if tokenized else 0
        count = ctx.ask(f"chat_count:{name}", lambda m=messages: ctx.surface.chat_prompt_count(m))
        rows.append({"conversation": name, "server_prompt_tokens": count, "reference_template_tokens": len(ref_ids),
                     "with_the_servers_bos": len(ref_ids) + extra_bos,
                     "reference_rendering_as_server_tokenizes": None if tokenized is None else len(tokenized),
                     "reference_render": expected_text})
    if diffs:
        first = diffs[0]
        yield Problem(f"the server renders a different chat prompt on {len(diffs)} of {len(CONVERSATIONS)} "
                      f"conversations; first difference at character {first['first_difference']['offset']} "
                      f"({first['conversation']})", evidence={"diffs": diffs}, location=TEMPLATE)
        return
    bad = [r for r in rows if r["server_prompt_tokens"] is not None and r["server_prompt_tokens"] not in
           (r["reference_template_tokens"], r["with_the_servers_bos"], r["reference_rendering_as_server_tokenizes"])]
    if bad:
        yield Problem(f"the server's chat prompt differs from the model's template: {count_summary(bad)}"
                      f"{default_system_note(ctx, rows, bad)}",
                      evidence={"conversations": rows, "note": "the server does not return its rendering; "
                                "compared prompt token counts (usage.prompt_tokens)"}, location=TEMPLATE)


def bos_apart(bos: str | None, expected: str, served: str) -> bool:
    """A rendering that differs from the reference's by one leading BOS alone: EPT011's (a BOS gained twice, or
    cut as a duplicate, re-added or not by the server's tokenizer), not another template."""
    return bool(bos) and (served == bos + expected or expected == bos + served)


def count_summary(bad: list[dict]) -> str:
    return "; ".join(f"{r['conversation']}: {r['server_prompt_tokens']} tokens vs {r['reference_template_tokens']}"
                     for r in bad)


def default_system_note(ctx: EndpointInputs, rows: list[dict], bad: list[dict]) -> str:
    """Name the common cause: only conversations without a system message differ and the reference template
    writes a system turn of its own for them."""
    differing, names = {r["conversation"] for r in bad}, {r["conversation"] for r in rows}
    if not default_system_dropped(differing, names, ctx.reference.render(CONVERSATIONS["no system"])):
        return ""
    return (" -- only conversations without a system message differ, and the model's template inserts a "
            "default system turn there: the server's template drops it")


@check("EPT013", category="endpoint", severity="error", needs=NEEDS,
       hint="the server's tokenizer splits text differently: fix the pre-tokenizer (GGUF tokenizer.ggml.pre) or "
            "reconvert the model with a converter that knows this tokenizer")
@asks_server
def pretokenizer_splits(ctx: EndpointInputs):
    """Pre-tokenizer split differences: the server tokenizes plain text into other ids than the reference.

    A GGUF converted with an unknown or wrong pre-tokenizer (`tokenizer.ggml.pre` = default, llama.cpp #7724,
    ollama #17698) splits digits, contractions and whitespace differently, so the model sees token
    sequences it was not trained on. The spans where the two tokenizations cut differently are shown."""
    ref = ctx.reference
    results = []
    for text in RAW_TEXTS:
        server = ctx.tokenize(text)
        if server is None:
            expected = len(ref.prompt_ids(text))
            count = ctx.ask(f"count:{text}", lambda t=text: ctx.surface.prompt_count(t))
            if count is not None and count != expected:
                results.append({"text": text, "server_prompt_tokens": count, "reference_tokens": expected})
            continue
        plain, served = ref.tokenizer.encode(text, add_special_tokens=False), strip_specials(ctx, server, text)
        if served != plain:
            outside = [i for i in served if i < 0 or i > ref.tokenizer.max_token_id]
            spans = [] if outside else split_spans(text, ref.tokenizer.decode, plain, served)
            results.append({"text": text, "reference_ids": plain, "server_ids": served, "spans": spans,
                            "ids_outside_vocabulary": outside})
    if not results:
        return
    spans = [s for r in results for s in r.get("spans", [])]
    shown = "; ".join(f"{s['text']!r}: {s['reference']} vs {s['server']}" for s in spans[:3])
    # a regex approximation that differs only on rare non-ASCII characters (llama.cpp's SmolLM2 pre-tokenizer
    # splits '½' off, transformers does not) is worth knowing; differences on ASCII text are a wrong tokenizer
    rare = all(r.get("spans") for r in results) and all(not s["text"].isascii() for s in spans)
    yield Problem(f"the server tokenizes {len(results)} of {len(RAW_TEXTS)} plain texts differently"
                  + (" (only on non-ASCII characters)" if rare else "") + (f"; e.g. {shown}" if shown else ""),
                  severity="warning" if rare else None, evidence={"texts": results},
                  location=Location(file="tokenizer.json"))


@check("EPT014", category="endpoint", severity="error", needs=NEEDS,
       hint="register the token as special/added in the served tokenizer (GGUF token_type CONTROL or USER_DEFINED)")
@asks_server
def special_tokens(ctx: EndpointInputs):
    """Added/special tokens not recognised: the server splits a special token's text into ordinary pieces.

    Chat templates write <|im_start|>, <|eot_id|> and friends as text; a server whose tokenizer does not
    know them as special feeds the model the characters '<', '|', ... instead of the control token."""
    ref = ctx.reference
    if ctx.tokenize(RAW_TEXTS[0]) is None:
        raise Skip("the server has no tokenize route")
    bad = []
    for text in ref.special_texts():
        expected = ref.tokenizer.encode(text, add_special_tokens=False)
        served = strip_specials(ctx, ctx.tokenize(text), text)
        if served != expected:
            bad.append({"token": text, "reference_ids": expected, "server_ids": served})
    if bad:
        names = ", ".join(f"{b['token']} -> {b['server_ids']}" for b in bad[:4])
        yield Problem(f"the server does not map {len(bad)} special token(s) to the model's ids: {names}",
                      evidence={"tokens": bad}, location=Location(file="tokenizer.json", logical="added_tokens"))
