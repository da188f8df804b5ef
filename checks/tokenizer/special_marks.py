"""TOK034: the tokens generation relies on (EOS, the chat template's turn markers) marked special in tokenizer.json.

An added token with "special": false still encodes as one token, but readers downstream treat it as text:
transformers' decode(skip_special_tokens=True) prints it, servers leave it in the answer, and llama.cpp's converter
types it USER_DEFINED (CONTROL only when its text looks like <|...|>), while a converter that lists only the
vocabulary types it NORMAL, which llama.cpp splits into plain pieces in every prompt (GGF036, llama.cpp#27683): the
model never sees the turn end it was trained on and loops."""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check
from checks.shared.chat.end_of_turn import end_of_turn
from checks.tokenizer.chat_template import MARKER, _rendered_or_skip


def _relied_on(ctx, tok) -> dict[int, str]:
    """id -> why generation relies on it: the EOS ids, the template's end of turn, the markers it writes."""
    out: dict[int, str] = {}
    generation = ctx.generation_config
    eos = [tok.eos_token_id, *(generation.eos_token_ids or [] if generation is not None else [])]
    for token_id in eos:
        if isinstance(token_id, int) and not isinstance(token_id, bool):
            out.setdefault(token_id, "the EOS")
    found = end_of_turn(tok)
    if found is not None:
        out.setdefault(found[0], "the template's end of turn")
    for marker in sorted(set(MARKER.findall(_rendered_or_skip(tok)))):
        ids = tok.encode(marker, add_special_tokens=False)
        if len(ids) == 1:                  # a marker split into pieces is TOK009's finding
            out.setdefault(ids[0], "written by the chat template")
    return out


@check("TOK034", category="tokenizer", severity="warning", needs=("tokenizer",),
       hint="Set \"special\": true on the token in tokenizer.json's added_tokens (and keep it in "
            "tokenizer_config.json's added_tokens_decoder the same), then re-convert any GGUF made from it.")
def turn_tokens_marked_special(ctx):
    """The EOS and the turn markers the chat template writes are special added tokens in tokenizer.json.

    A turn end listed in added_tokens with "special": false (or only in the vocabulary) encodes as one token, but
    decode(skip_special_tokens=True) prints it, stacks that stop on special tokens run past it, and converters
    write it as a text token (llama.cpp's: USER_DEFINED unless its text looks like <|...|>; NORMAL, split into
    pieces in the prompt, where only the vocabulary is read: GGF036): the model loops (llama.cpp#27683). Every
    EOS id (tokenizer_config.json, generation_config.json), the template's end of turn and every marker it writes
    as one token is read.
    """
    tok = ctx.tokenizer
    if not tok.chat_template:
        raise Skip("no chat template (base model)")
    for token_id, why in _relied_on(ctx, tok).items():
        added = tok.added_by_id.get(token_id)
        if added is not None and added.special:
            continue
        text = tok.id_to_token(token_id)
        if text is None:                   # an id past the vocabulary is VOC's finding
            continue
        where = "listed with \"special\": false" if added is not None else "not an added token (vocabulary only)"
        yield Problem(f"{text!r} (id {token_id}, {why}) is {where} in tokenizer.json: decoders print it, "
                      "converters type it as text, and runtimes that stop on special tokens run past the turn end",
                      evidence={"token": text, "id": token_id, "why": why, "added": added is not None})
