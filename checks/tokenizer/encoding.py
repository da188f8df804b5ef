"""Tokenizer checks (TOK001-TOK006, TOK010): tokenizer.json is well formed, covers every byte, round-trips
a multilingual probe set and maps each special token string to its one id (lossy round trips and special
tokens split into pieces are the commonest tokenizer faults). Chat-template
checks (TOK007-TOK009) live in checks/tokenizer/chat_template.py."""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check
from findings import Location
from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.pipeline.pre_tokenizers import BYTES_TO_UNICODE
from checks.shared.token_table import TokenTable, token_table

# Round-trip probes: scripts, emoji with modifiers and ZWJ, whitespace runs, code, control characters, NUL.
PROBES = (
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "日本語のテキスト、ひらがなとカタカナ。",
    "中文字符测试：你好，世界！",
    "한국어 텍스트입니다",
    "Русский текст и Ελληνικά",
    "العربية والعبرية עברית",
    "हिन्दी और தமிழ்",
    "emoji 😀👍🏽 and ZWJ 👨\u200d👩\u200d👧 flags 🇫🇷",
    "  leading, trailing and   internal   whitespace runs  ",
    "tabs\tand\r\nCRLF\n\n\nblank lines",
    "def f(x):\n    return {'a': x ** 2}  # code\n",
    "numbers 1234567890 3.14159 -42 1e-9",
    "control \x01\x02\x1b[0m\x7f characters",
    "nul \x00 byte",
    "combining e\u0301 vs \u00e9, ligature \ufb01, full-width \uff21\uff11",
    "hello ! it 's a test .",
)
# normalizers that rewrite text on purpose (NFKC folds full-width letters, ligatures; Lowercase, Strip...)
LOSSY_NORMALIZERS = ("NFKC", "NFKD", "NFC", "NFD", "Lowercase", "Strip", "StripAccents", "BertNormalizer",
                     "Nmt", "Precompiled")


def _table_or_skip(ctx) -> TokenTable:
    if not (ctx.model_dir / "tokenizer.json").is_file():
        raise Skip("no tokenizer.json (FIL001)")
    try:
        return token_table(ctx)
    except ModelDirError as e:
        raise Skip(f"tokenizer.json unreadable: {e.problem} (TOK001)") from None


@check("TOK001", category="tokenizer", severity="error", needs=("files",),
       hint="Re-export tokenizer.json with the tokenizers library (tokenizer.save('tokenizer.json')).")
def tokenizer_loads(ctx):
    """tokenizer.json parses and builds a tokenizer.

    Every other tokenizer check, the engine and every server start from this file; a truncated
    download, a hand edit that breaks the JSON, or a model type other than BPE stops everything.
    The reference tokenizer's error names the field that is wrong.

    Remedy: re-export the tokenizer from the original source.
    """
    from checks.catalogue.inputs import ResourceError
    if not (ctx.model_dir / "tokenizer.json").is_file():
        raise Skip("no tokenizer.json (FIL001)")
    try:
        ctx.tokenizer
    except ResourceError as e:
        yield Problem(f"tokenizer does not load: {e.message}", evidence={"file": "tokenizer.json"})


@check("TOK002", category="tokenizer", severity="error", needs=("files",),
       hint="Regenerate the merges together with the vocabulary; never edit one without the other.")
def merges_in_vocab(ctx):
    """Every BPE merge names two vocabulary tokens and produces a vocabulary token.

    BPE applies merges in rank order; a merge whose parts or result are not in the vocabulary can
    never apply (tokenizers refuses to load it: "Merges text file invalid") and the text that needed
    it is split into more, rarer tokens than the model was trained on. It appears after removing
    tokens from a vocabulary or splicing two tokenizers together.

    Remedy: rebuild merges and vocab together.
    """
    table = _table_or_skip(ctx)
    if table.model_type != "BPE":
        raise Skip(f"model type {table.model_type!r} has no merges")
    bad = [(i, a, b) for i, (a, b) in enumerate(table.merges)
           if a not in table.vocab or b not in table.vocab or a + b not in table.vocab]
    if bad:
        i, a, b = bad[0]
        yield Problem(f"{len(bad)} merge(s) reference tokens missing from the vocabulary, e.g. merge {i} "
                      f"{a!r} + {b!r}", evidence={"count": len(bad), "merges": [f"{x} {y}" for _, x, y in bad[:10]]},
                      location=Location(file="tokenizer.json", logical="model.merges"))


@check("TOK003", category="tokenizer", severity="error", needs=("files",),
       hint="Give every token its own id (0..n-1 without gaps); re-export the tokenizer.")
def ids_unique(ctx):
    """Token ids are unique (no two tokens share an id) and have no gaps.

    Two tokens with one id make decoding ambiguous and encoding of one of them impossible to invert;
    an added token reusing a vocabulary id with different text silently replaces that token. A gap is
    an id no string maps to: its embedding row is dead weight and sampling it decodes to nothing
    (warning).

    Remedy: renumber the tokens or remove the duplicate.
    """
    table = _table_or_skip(ctx)
    owner: dict[int, str] = {}
    clashes = []
    for token, i in table.vocab_pairs + [(a.get("content", ""), a["id"]) for a in table.added]:
        if i in owner and owner[i] != token:
            clashes.append((i, owner[i], token))
        owner.setdefault(i, token)
    if clashes:
        i, a, b = clashes[0]
        yield Problem(f"{len(clashes)} id(s) shared by different tokens, e.g. id {i}: {a!r} and {b!r}",
                      evidence={"count": len(clashes), "ids": [c[0] for c in clashes[:10]]},
                      location=Location(file="tokenizer.json", logical="model.vocab"))
    gap_count = table.max_id() + 1 - len(owner)
    if gap_count > 0:
        gaps = first_gaps(sorted(owner), 20)
        yield Problem(f"{gap_count} id(s) below the max id {table.max_id()} have no token, e.g. {gaps[0]}",
                      evidence={"count": gap_count, "ids": gaps}, severity="warning",
                      location=Location(file="tokenizer.json", logical="model.vocab"))


def first_gaps(ids: list[int], limit: int) -> list[int]:
    """The first `limit` non-negative integers missing from sorted `ids` (without walking huge ranges)."""
    gaps, expected = [], 0
    for i in ids:
        while expected < i and len(gaps) < limit:
            gaps.append(expected)
            expected += 1
        if len(gaps) >= limit:
            break
        expected = i + 1
    return gaps


# bytes that never occur in UTF-8 text: overlong leads C0/C1, leads past U+10FFFF (F5-FF), and F1/F2, the lead
# bytes of planes 4-11 (U+40000-U+BFFFF), where Unicode assigns nothing (llama.cpp's tokenizer test skips them too)
NEVER_IN_UTF8 = frozenset([0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)])
# C0 control characters other than tab/newline/carriage return, and DEL: rare, dropped silently when missing
RARE_CONTROL = frozenset([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])


@check("TOK004", category="tokenizer", severity="error", needs=("files",),
       hint="Add the missing byte tokens (byte-level BPE needs every byte of UTF-8 text; SentencePiece "
            "byte_fallback needs <0x00>..<0xFF>).")
def all_bytes_encodable(ctx):
    """A byte-level (or byte-fallback) tokenizer has a token for every byte UTF-8 text can contain.

    Byte-level BPE promises that any input encodes without an unknown token, because every byte has a
    base token; a vocabulary missing one (pruned, or a broken conversion) makes text containing it
    unencodable: tokenizers silently drops it ("a\x04b" encodes as "ab") and the model never sees the
    character. A missing byte that starts or continues ordinary UTF-8 characters is an error (whole
    scripts vanish); a missing rare control character (\x01, \x04, ...) is info; bytes that never occur
    in UTF-8 text (0xC0, 0xC1, 0xF5-0xFF, and 0xF1/0xF2 which only start unassigned planes 4-11) may be
    absent. The same holds for SentencePiece byte_fallback
    and its <0xNN> tokens.

    Remedy: restore the base byte tokens.
    """
    table = _table_or_skip(ctx)
    if table.is_byte_level():
        needed = {b: BYTES_TO_UNICODE[b] for b in range(256)}
    elif table.has_byte_fallback():
        needed = {b: f"<0x{b:02X}>" for b in range(256)}
    else:
        raise Skip("neither byte-level nor byte-fallback: unknown characters map to <unk> by design")
    missing = [b for b, token in needed.items() if b not in NEVER_IN_UTF8 and table.token_to_id(token) is None]
    text_bytes = [b for b in missing if b not in RARE_CONTROL]
    controls = [b for b in missing if b in RARE_CONTROL]
    if text_bytes:
        yield Problem(f"{len(text_bytes)} byte(s) of ordinary UTF-8 text have no token, e.g. 0x{text_bytes[0]:02X} "
                      f"({needed[text_bytes[0]]!r}): text containing them cannot be encoded",
                      evidence={"bytes": [f"0x{b:02X}" for b in text_bytes[:32]], "count": len(text_bytes)})
    if controls:
        yield Problem(f"{len(controls)} control character byte(s) have no token and are dropped when encoded: "
                      + ", ".join(f"0x{b:02X}" for b in controls[:12]), severity="info",
                      evidence={"bytes": [f"0x{b:02X}" for b in controls], "count": len(controls)})


def lossy_normalizers(spec) -> list[str]:
    """Names of normalizer components that rewrite text on purpose."""
    if not isinstance(spec, dict):
        return []
    kind = spec.get("type")
    found = [kind] if kind in LOSSY_NORMALIZERS else []
    for child in spec.get("normalizers") or []:
        found += lossy_normalizers(child)
    return found


def _normalization(tok, table: TokenTable):
    """(names of the lossy normalizers, the text -> text normalization) of a tokenizer. A tokenizer.model one
    normalizes in its pre-tokenizer slot (sentencepiece's map, whitespace removal): lossy when it rewrites."""
    rewrite = getattr(tok.pre_tokenizer, "rewrite", None)
    if rewrite is not None:
        return [f"sentencepiece {tok.sentencepiece.normalizer.get('name') or 'normalizer'}"], rewrite
    return lossy_normalizers(table.raw.get("normalizer")), getattr(tok, "normalizer", None)


@check("TOK005", category="tokenizer", severity="error", needs=("tokenizer",),
       hint="Fix the decoder/pre-tokenizer pair (e.g. a ByteLevel decoder for a ByteLevel pre-tokenizer); "
            "lossy normalizers (NFKC) are by design and reported as info.")
def round_trip(ctx):
    """decode(encode(text)) gives the text back on a multilingual probe set (lossy normalizers noted as info).

    The probe set covers CJK, Korean, Cyrillic/Greek, Arabic/Hebrew, Devanagari/Tamil, emoji with skin
    tones and ZWJ sequences, whitespace runs, code, control characters and NUL. A byte-level tokenizer
    must return every probe exactly; a mismatch means a decoder that does not invert the
    pre-tokenizer, a missing byte, or an unk token. Normalizers such as NFKC fold characters on purpose
    (full-width letters, ligatures), and SentencePiece-style prefix spaces make leading whitespace
    ambiguous: both are reported as info, not error. Also checks that
    encode(decode(ids)) == ids. Modelled on tokenizers#1543 (clean_up_tokenization_spaces turns
    "hello !" into "hello!"), transformers#46491 (leading-space ambiguity), llama.cpp#3502/#7049.

    Remedy: repair the decoder chain, or accept the normalizer's folding knowingly.
    """
    tok = ctx.tokenizer
    lossy, normalize = _normalization(tok, token_table(ctx))
    broken, folded, prefix = [], [], []
    for text in PROBES:
        ids = tok.encode(text, add_special_tokens=False)
        decoded = tok.decode(ids)
        if decoded == text and tok.encode(decoded, add_special_tokens=False) == ids:
            continue
        case = {"probe": text, "decoded": decoded}
        if bool(lossy) and normalize is not None and normalize(text) != text:
            folded.append(case)   # a lossy normalizer may only change probes it actually rewrites
        elif decoded != text and decoded.lstrip() == text.lstrip():
            prefix.append(case)   # SentencePiece/add_prefix_space: leading whitespace is ambiguous by design
        else:
            broken.append(case)
    if broken:
        yield Problem(f"{len(broken)} of {len(PROBES)} probes do not round-trip, e.g. {broken[0]['probe'][:30]!r} "
                      f"-> {broken[0]['decoded'][:30]!r}", evidence={"failures": broken[:8]})
    if folded:
        yield Problem(f"normalizer {'+'.join(lossy)} rewrites {len(folded)} of {len(PROBES)} probes by design, "
                      f"e.g. {folded[0]['probe'][:30]!r} -> {folded[0]['decoded'][:30]!r}",
                      evidence={"normalizers": lossy, "rewritten": folded[:8]}, severity="info")
    if prefix:
        yield Problem(f"leading whitespace changes in {len(prefix)} probe(s) (prefix-space handling, "
                      f"transformers#46491), e.g. {prefix[0]['probe'][:20]!r} -> {prefix[0]['decoded'][:20]!r}",
                      evidence={"changed": prefix[:8]}, severity="info")
    if ctx.tokenizer_config.get("clean_up_tokenization_spaces"):
        yield Problem("clean_up_tokenization_spaces is true: transformers' decode turns 'hello !' into 'hello!' "
                      "(tokenizers#1543)", evidence={"clean_up_tokenization_spaces": True}, severity="info",
                      location=Location(file="tokenizer_config.json", logical="clean_up_tokenization_spaces"))


@check("TOK006", category="tokenizer", severity="error", needs=("tokenizer",),
       hint="Declare each special token in tokenizer.json added_tokens (special: true) with its vocabulary id.")
def special_tokens_atomic(ctx):
    """Every special token string encodes to exactly its one id.

    Chat templates write special tokens as text ("<|im_end|>"); the tokenizer must turn that text back
    into the single special id, or the model sees "<", "|", "im", "_end", ... and never recognises the
    end of a turn — generation then runs on. This happens when a token is listed in
    tokenizer_config.json / special_tokens_map.json but not in tokenizer.json's added_tokens, or
    is added with normalized: true and a normalizer rewrites it.

    Remedy: register the token as an added special token with its id.
    """
    tok = ctx.tokenizer
    contents = {t.content: t.id for t in tok.added_tokens if t.special}
    for text in tok.all_special_tokens:
        contents.setdefault(text, tok.token_to_id(text))
    for text, token_id in sorted(contents.items(), key=lambda kv: str(kv[0])):
        ids = tok.encode(text, add_special_tokens=False)
        if token_id is None or ids != [token_id]:
            yield Problem(f"special token {text!r} encodes to {ids[:8]} instead of [{token_id}]",
                          evidence={"token": text, "id": token_id, "encoded": ids[:16]},
                          location=Location(file="tokenizer.json", logical="added_tokens"))


@check("TOK010", category="tokenizer", severity="info", needs=("tokenizer",),
       hint="Use padding_side='left' for batched generation with a decoder-only model.")
def padding_side_noted(ctx):
    """Note padding_side = right on a decoder-only model (a batched-generation hazard).

    Right padding puts pad tokens between a short prompt and its continuation; without position ids
    computed from the attention mask, the next token is predicted after the pads. transformers warns
    "A decoder-only architecture is being used, but right-padding was detected" (transformers#25790,
    unsloth#3699). Fine for training, wrong for generation.

    Remedy: set tokenizer.padding_side = "left" before batched generation.
    """
    if ctx.tokenizer_config.get("padding_side") == "right":
        yield Problem("tokenizer pads on the right: batched generation needs left padding",
                      evidence={"padding_side": "right"},
                      location=Location(file="tokenizer_config.json", logical="padding_side"))
