"""SentencePiece's meta space and piece types, defined once.

A SentencePiece model (tokenizer.model's ModelProto.SentencePiece.type) and a GGUF (tokenizer.ggml.token_type, which
llama.cpp copies from it) number the piece types the same way, so both readers take them from here, as do the
models that merge pieces and the checks that compare the files."""
from __future__ import annotations

SPACE = "▁"   # U+2581: SentencePiece writes a space as this character inside pieces (escape_whitespaces)

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
PIECE_TYPES = {NORMAL: "NORMAL", UNKNOWN: "UNKNOWN", CONTROL: "CONTROL", USER_DEFINED: "USER_DEFINED",
               UNUSED: "UNUSED", BYTE: "BYTE"}
# the pieces a merge may produce (sentencepiece's model_interface.cc keeps them in pieces_, the rest are reserved)
MERGEABLE_TYPES = (NORMAL, USER_DEFINED, UNUSED)


def byte_value(piece: str) -> int | None:
    """0xNN for a "<0xNN>" piece (upper-case hex, as sentencepiece writes them), else None."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        digits = piece[3:5]
        if all(c in "0123456789ABCDEF" for c in digits):
            return int(digits, 16)
    return None
