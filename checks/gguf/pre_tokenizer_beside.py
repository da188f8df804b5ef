"""GGF037: a BPE GGUF's pre-tokenizer (the regexes tokenizer.ggml.pre selects in llama.cpp) against the
tokenizer.json it was converted from, when that file sits beside the GGUF.

llama.cpp does not read tokenizer.json's Split regex: it keeps its own regexes per pre name, and the converter
picks the name by hashing one check text. A model whose regex changed while its hash matched an older name, or a
file re-tagged with another name, splits digits, contractions, whitespace or scripts differently from the
tokenizer it was trained with (llama.cpp#23252). Both tokenizers encode the same probe strings here; the strings
that come out differently are named with both splits."""
from __future__ import annotations

import json
from pathlib import Path

from checks.catalogue.registry import Problem, Skip, check
from reference_engine.errors import ModelDirError

# texts where the pre-tokenizer regexes of known models part: digit runs, contractions and case, whitespace runs,
# letters against digits and punctuation, scripts without spaces, symbols
PROBES = ("12345", "3.14159", "1,000,000", "$100.00", "1st 2nd", "I'm", "you'll", "DON'T", "they've",
          "hello   world", "a\n\n\nb", "  indented", "tab\tsep", "line\r\nbreak", "abc123def", "x=a+b;",
          "...!!!???", "naïve café", "日本語のテキスト", "한국어 문장", "emoji 😀👍", "αβγ δ", "foo_bar-baz",
          "http://x.io/a?b=1", "#tag @user", "ABC DEF", "  \n  ", "don't stop")
SAME_VOCAB_SAMPLE = 2000          # ids compared to tell the two files hold one vocabulary


def _beside(ctx):
    """The tokenizer.json beside the GGUF, as the engine reads it; Skip when none can be read."""
    from reference_engine.tokenizer.tokenizer import Tokenizer
    path = Path(ctx.gguf.path).parent / "tokenizer.json"
    if not path.is_file():
        raise Skip("no tokenizer.json beside the GGUF")
    try:
        return Tokenizer.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ModelDirError) as e:
        raise Skip(f"tokenizer.json beside the GGUF cannot be read: {' '.join(str(e).split())[:120]}") from None


def _one_vocabulary(gguf_tok, json_tok) -> bool:
    n = min(SAME_VOCAB_SAMPLE, len(gguf_tok.model.id_to_token), len(json_tok.model.id_to_token))
    return n > 0 and all(gguf_tok.id_to_token(i) == json_tok.id_to_token(i) for i in range(n))


def _pieces(tok, ids: list[int]) -> list[str]:
    return [tok.decode([i]) for i in ids]


@check("GGF037", category="tokenizer", severity="error", needs=("gguf", "tokenizer"),
       hint="Re-convert with a convert_hf_to_gguf.py whose pre-tokenizer table knows this model (or set "
            "tokenizer.ggml.pre to the name whose regex is tokenizer.json's), then re-run this check.")
def gguf_pre_tokenizer_matches_beside(ctx):
    """A BPE GGUF splits text like the tokenizer.json beside it (the pre-tokenizer regexes agree).

    llama.cpp applies the regexes its tokenizer.ggml.pre name selects, never tokenizer.json's own; when the two
    differ (a model whose regex changed under a known hash, a file re-tagged by hand: llama.cpp#23252) the GGUF
    feeds the model token sequences it was never trained on, for digits, contractions, whitespace or scripts
    only, so most English prompts still look right. Both tokenizers encode probe strings that exercise those
    cases; each string split differently is named with both splits.
    """
    if ctx.gguf.get("tokenizer.ggml.model") != "gpt2":
        raise Skip("not a BPE (gpt2) vocabulary: llama.cpp uses no pre-tokenizer regexes for it")
    json_tok, gguf_tok = _beside(ctx), ctx.tokenizer
    if not _one_vocabulary(gguf_tok, json_tok):
        raise Skip("the GGUF and tokenizer.json hold different vocabularies (not one conversion)")
    differ = []
    for text in PROBES:
        a, b = gguf_tok.encode(text, add_special_tokens=False), json_tok.encode(text, add_special_tokens=False)
        if a != b:
            differ.append({"input": text, "gguf": _pieces(gguf_tok, a), "tokenizer_json": _pieces(json_tok, b)})
    if differ:
        first = differ[0]
        yield Problem(f"tokenizer.ggml.pre {ctx.gguf.get('tokenizer.ggml.pre')!r} splits {len(differ)} of "
                      f"{len(PROBES)} probe strings unlike tokenizer.json beside it, e.g. {first['input']!r}: "
                      f"GGUF {first['gguf']} vs tokenizer.json {first['tokenizer_json']}",
                      evidence={"differ": differ[:10], "probes": len(PROBES)})
