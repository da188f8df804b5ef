"""GGF036: the tokens generation relies on (EOS, EOT, the chat template's turn markers) typed as special in a GGUF's
tokenizer.ggml.token_type.

llama.cpp matches a token's text in a prompt as that one token only when the token is typed CONTROL or
USER_DEFINED: a turn marker typed NORMAL that the template writes reaches the model as plain-text pieces
('<', '|', 'im', '_end', ...), and an EOS typed NORMAL is printed as text where a runtime stops on control
tokens. The model never sees a turn end it knows and runs on (llama.cpp#27683). llama.cpp retypes a few
well-known turn ends by their text (<|im_end|>, <|eot_id|>, <end_of_turn>, with a load-time warning); other
markers, and other readers of the file, take the type as written."""
from __future__ import annotations

import regex

from checks.catalogue.registry import Problem, Skip, check
from reference_engine.tokenizer.models.pieces import CONTROL, PIECE_TYPES, USER_DEFINED

SPECIAL_TYPES = (CONTROL, USER_DEFINED)
ROLES = ("eos", "eot", "eom")
# turn markers as templates write them: <|im_end|>, <end_of_turn>, <｜end▁of▁sentence｜>, [INST], [gMask]
MARKER = regex.compile(r"<[|｜]?[^<>\s]{1,40}[|｜]?>|\[[A-Za-z_/]{2,20}\]")


def relied_on(gguf) -> dict[int, str]:
    """id -> why generation relies on it: a declared end-of-generation id, or a marker the template writes."""
    tokens = gguf.get("tokenizer.ggml.tokens")
    out: dict[int, str] = {}
    for role in ROLES:
        token_id = gguf.get(f"tokenizer.ggml.{role}_token_id")
        if isinstance(token_id, int) and not isinstance(token_id, bool) and 0 <= token_id < len(tokens):
            out.setdefault(token_id, f"tokenizer.ggml.{role}_token_id")
    template = gguf.get("tokenizer.chat_template")
    if isinstance(template, str):
        written = set(MARKER.findall(template))
        for token_id, text in enumerate(tokens):
            if text in written:
                out.setdefault(token_id, "written by the chat template")
    return out


@check("GGF036", category="tokenizer", severity="error", needs=("gguf",),
       hint="Re-convert with the token marked special in tokenizer.json (added_tokens \"special\": true), or set "
            "its tokenizer.ggml.token_type entry to 3 (CONTROL) with gguf-py.")
def gguf_special_tokens_typed(ctx):
    """The EOS / EOT ids and the turn markers the chat template writes are typed CONTROL or USER_DEFINED.

    llama.cpp tokenizes a token's text as that token only when tokenizer.ggml.token_type marks it CONTROL (3) or
    USER_DEFINED (4). A turn end typed NORMAL (1), as a converter writes a token tokenizer.json does not list as
    special, is split into plain-text pieces wherever the template writes it, and printed as text when
    generated: the model never sees the turn end it was trained on and loops or runs to the token limit
    (llama.cpp#27683; llama.cpp retypes a few well-known turn ends by their text, no other marker). Every
    end-of-generation id and every token whose text the template writes is read.
    """
    if not ctx.is_gguf:
        raise Skip("not a GGUF model")
    gguf = ctx.gguf
    tokens, types = gguf.get("tokenizer.ggml.tokens"), gguf.get("tokenizer.ggml.token_type")
    if not isinstance(tokens, list) or not isinstance(types, list) or len(types) != len(tokens):
        raise Skip("no tokenizer.ggml.tokens / token_type of one entry per token (GGF012 reads that)")
    for token_id, why in relied_on(gguf).items():
        kind = types[token_id]
        if not isinstance(kind, int) or kind not in SPECIAL_TYPES:
            yield Problem(f"{tokens[token_id]!r} (id {token_id}, {why}) is typed {PIECE_TYPES.get(kind, repr(kind))} "
                          "in tokenizer.ggml.token_type: llama.cpp splits its text into plain pieces in the prompt "
                          "and prints it when generated, so the model does not see or stop at its turn end",
                          evidence={"token": tokens[token_id], "id": token_id, "token_type": kind, "why": why})
