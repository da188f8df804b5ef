"""Tokenizer-source checks (TOK020-TOK029): the several descriptions of one tokenizer a directory holds agree.

tokenizer.json, a SentencePiece tokenizer.model, tokenizer_config.json's flags, a tiktoken file, tekken.json, a
GGUF's tokenizer.ggml.* arrays and the chat template files are read by different serving stacks; the incidents
are the gaps between them. Each finding names the sources that disagree and the smallest input that behaves
differently (checks/tokenizer/source_compare.py). The tokenizer.model side is sentencepiece's own encoding, except
on text holding CONTROL pieces or under tokenizer_config.json flags sentencepiece does not know, where it is
transformers' reading of the file; messages say which (source_compare.spm_label)."""
from __future__ import annotations

from checks.tokenizer import source_compare as src
from checks.catalogue.registry import Problem, Skip, check
from findings import Location
from reference_engine.errors import ModelDirError, UnsupportedError

ROLES = (("bos", "bos_id"), ("eos", "eos_id"), ("unk", "unk_id"), ("pad", "pad_id"))


def _spm_or_skip(ctx):
    try:
        model = src.sentencepiece_model(ctx)
    except ModelDirError as e:
        raise Skip(f"tokenizer.model unreadable: {e.problem}") from None
    if model is None:
        raise Skip("no SentencePiece tokenizer.model")
    return model


def _declared_or_skip(ctx, **flags):
    try:
        return src.spm_tokenizer(ctx, **flags)
    except ModelDirError as e:
        raise Skip(f"tokenizer.model cannot be run here: {e.problem}") from None


def _json_or_skip(ctx):
    tok = src.json_tokenizer(ctx)
    if tok is None:
        raise Skip("no tokenizer.json to compare with")
    return tok


def _surface(piece: str) -> str:
    return piece.replace(src.SPACE, " ")


@check("TOK029", category="tokenizer", severity="error", needs=(),
       hint="Restore tokenizer.model from the original release (a truncated download or a bad conversion).")
def sentencepiece_model_reads(ctx):
    """A SentencePiece tokenizer.model parses and is one sentencepiece would load.

    llama.cpp's converter, mistral-common, sentencepiece-based servers and transformers' slow tokenizers start
    from tokenizer.model; a truncated or corrupt file (or one sentencepiece refuses: duplicate pieces, byte
    pieces without byte_fallback, a missing <0xNN> piece) breaks them even when tokenizer.json is fine. The
    protobuf and its precompiled normalization map are read by hand with every length and offset bounded, so the
    finding names the malformation. A model this tool does not run (Unigram, whitespace as suffix) is only noted.

    Remedy: replace the file with the original.
    """
    from reference_engine.tokenizer.sources.spm_tokenizer import check_runnable
    path = src.source_root(ctx) / "tokenizer.model"
    if not path.is_file():
        raise Skip("no tokenizer.model")
    try:
        model = src.sentencepiece_model(ctx)
        if model is None:
            raise Skip("tokenizer.model is a tiktoken-format file (TOK027)")
        check_runnable(model)
    except UnsupportedError as e:
        yield Problem(f"tokenizer.model is not run by the reference engine: {e.problem}", severity="info",
                      evidence={"reason": e.problem}, location=Location(file="tokenizer.model"))
    except ModelDirError as e:
        yield Problem(f"tokenizer.model is unreadable: {e.problem}", evidence={"reason": e.problem},
                      location=Location(file="tokenizer.model"))


@check("TOK020", category="tokenizer", severity="error", needs=(),   # also a GGUF beside its tokenizer.model
       hint="Regenerate tokenizer.json (or the GGUF) from the same tokenizer.model; never edit one vocabulary alone.")
def vocabularies_agree(ctx):
    """tokenizer.model, tokenizer.json and a GGUF's tokenizer.ggml.tokens give every id the same piece (and the
    GGUF the same scores).

    The model was trained on one numbering; a stack reading another file with a piece moved, renamed or
    missing feeds the model wrong ids for ordinary text (llama.cpp converts from tokenizer.model, transformers
    reads tokenizer.json). Score differences reorder SentencePiece merges, so the same text splits
    differently. Tokens tokenizer.json adds past the end of tokenizer.model are not compared.

    Remedy: rebuild the other files from the tokenizer the model was trained with.
    """
    model = _spm_or_skip(ctx)
    sources = {}
    tok = src.json_tokenizer(ctx)
    if tok is not None:
        sources["tokenizer.json"] = {i: tok.id_to_token(i) for i in range(len(model.pieces))}
    if ctx.is_gguf:
        tokens = ctx.gguf.get("tokenizer.ggml.tokens") or []
        sources["GGUF"] = dict(enumerate(tokens[:len(model.pieces)]))
    if not sources:
        raise Skip("tokenizer.model is the only vocabulary")
    for name, table in sources.items():
        bad = [i for i, piece in enumerate(model.pieces) if table.get(i) != piece]
        if not bad:
            continue
        cases = [{"id": i, "tokenizer.model": model.pieces[i], name: table.get(i)} for i in bad[:10]]
        message = (f"{len(bad)} id(s) have a different piece in tokenizer.model and {name}, e.g. id {bad[0]}: "
                   f"{model.pieces[bad[0]]!r} vs {table.get(bad[0])!r}")
        difference = _vocab_difference(ctx, tok, [model.pieces[i] for i in bad[:50]] +
                                       [t for i in bad[:50] if isinstance(t := table.get(i), str)])
        if difference is not None and name == "tokenizer.json":
            message += "; " + difference.describe("tokenizer.json", src.spm_label(ctx, difference.text))
        yield Problem(message, evidence={"count": len(bad), "ids": cases,
                                         **({"input": difference.text} if difference else {})},
                      location=Location(file="tokenizer.json" if name == "tokenizer.json" else "tokenizer.model",
                                        logical=f"vocab[{bad[0]}]"))
    if tok is not None:
        yield from _merge_order(ctx, model, tok)
    if ctx.is_gguf:
        scores = ctx.gguf.get("tokenizer.ggml.scores") or []
        bad = [i for i, s in enumerate(model.scores) if i < len(scores) and float(scores[i]) != s]
        if bad:
            yield Problem(f"{len(bad)} piece score(s) differ between tokenizer.model and the GGUF, e.g. id {bad[0]} "
                          f"({model.pieces[bad[0]]!r}): {model.scores[bad[0]]} vs {scores[bad[0]]}: merges apply "
                          f"in a different order", evidence={"count": len(bad), "ids": bad[:20]},
                          location=Location(file="tokenizer.model", logical=f"pieces[{bad[0]}].score"))


def _merge_order(ctx, model, tok):
    """tokenizer.json's merges must rank merged pieces in tokenizer.model's score order (transformers' converter
    sorts them by score, highest first): a later merge whose result scores higher than an earlier one's means
    the two files merge in a different order."""
    from checks.shared.token_table import token_table
    table = token_table(ctx)
    index = {p: i for i, p in enumerate(model.pieces)}
    previous, inversions = None, []
    for rank, (a, b) in enumerate(table.merges):
        i = index.get(a + b)
        if i is None:
            continue
        if previous is not None and model.scores[i] > model.scores[previous[1]]:
            inversions.append((rank, a + b, previous[2]))
        if previous is None or model.scores[i] <= model.scores[previous[1]]:
            previous = (rank, i, a + b)
    if not inversions:
        return
    rank, piece, earlier = inversions[0]
    candidates = []
    for _, later, first in inversions[:50]:   # the two pieces alone, side by side, and after a word
        a, b = _surface(later), _surface(first)
        candidates += [a, b, a + b, b + a, "a" + a, "a" + b, "a" + b + a]
    difference = _vocab_difference(ctx, tok, candidates, strip=False)
    message = (f"{len(inversions)} merge(s) in tokenizer.json are out of tokenizer.model's score order, e.g. merge "
               f"{rank} makes {piece!r} (score {model.scores[index[piece]]}) after {earlier!r} (score "
               f"{model.scores[index[earlier]]})")
    if difference is not None:
        message += "; " + difference.describe("tokenizer.json", src.spm_label(ctx, difference.text))
    yield Problem(message, evidence={"count": len(inversions), "merge": rank, "piece": piece,
                                     **({"input": difference.text} if difference else {})},
                  location=Location(file="tokenizer.json", logical=f"model.merges[{rank}]"))


def _vocab_difference(ctx, tok, pieces, strip: bool = True):
    if tok is None:
        return None
    try:   # the legacy setting tokenizer.json follows, so that the input shows this difference, not that one
        declared = src.spm_tokenizer(ctx)
        flipped = src.spm_tokenizer(ctx, legacy=ctx.tokenizer_config.get("legacy") is False)
    except ModelDirError:
        return None
    if src.smallest_difference(tok, flipped, (" a", "a")) is None:
        declared = flipped
    texts = [(_surface(p).strip() or _surface(p)) if strip else p for p in pieces if p]
    return src.smallest_difference(tok, declared, texts)


@check("TOK021", category="tokenizer", severity="error", needs=("files",),
       hint="Set model.byte_fallback in tokenizer.json to tokenizer.model's trainer_spec.byte_fallback and keep the "
            "256 <0xNN> pieces.")
def byte_fallback_agrees(ctx):
    """tokenizer.json falls back to <0xNN> byte pieces exactly when tokenizer.model's byte_fallback says so.

    With byte_fallback, SentencePiece spells a character it has no piece for as its UTF-8 bytes (<0xE2> <0x98>
    <0x83>); without it the character becomes <unk>. A tokenizer.json converted without byte_fallback turns
    every rare character, emoji or unseen script into <unk> (the model reads nothing; decode loses the text),
    while sentencepiece-based stacks (mistral-common, llama.cpp) keep the bytes.

    Remedy: re-convert with byte_fallback, or fix the flag in tokenizer.json's model section.
    """
    model = _spm_or_skip(ctx)
    tok = _json_or_skip(ctx)
    json_flag = bool(src.token_table_raw(ctx).get("model", {}).get("byte_fallback", False))
    if json_flag == bool(model.byte_fallback):
        return
    message = (f"tokenizer.model has byte_fallback = {bool(model.byte_fallback)} but tokenizer.json "
               f"model.byte_fallback = {json_flag}")
    try:
        difference = src.smallest_difference(tok, src.spm_tokenizer(ctx), src.RARE_CHARACTERS)
    except UnsupportedError as e:   # a model this tool does not run (sentencepiece may well load it)
        difference = None
        message += f" (tokenizer.model is not run by this tool's reference engine: {e.problem})"
    except ModelDirError as e:   # e.g. BYTE pieces while byte_fallback is false: sentencepiece refuses it too
        difference = None
        message += f" (and tokenizer.model is malformed, sentencepiece refuses it too: {e.problem})"
    if difference is not None:
        message += ": " + difference.describe("tokenizer.json", src.spm_label(ctx, difference.text))
    shown = difference.evidence("tokenizer.json", "tokenizer.model") if difference else {}
    yield Problem(message, evidence={"tokenizer.model": bool(model.byte_fallback), "tokenizer.json": json_flag,
                                     **shown},
                  location=Location(file="tokenizer.json", logical="model.byte_fallback"))


@check("TOK022", category="tokenizer", severity="warning", needs=("files",),
       hint="Make tokenizer.json's normalizer / pre-tokenizer add the dummy prefix '▁' exactly as tokenizer.model's "
            "add_dummy_prefix says (or set add_prefix_space in tokenizer_config.json to match).")
def dummy_prefix_agrees(ctx):
    """Plain text encodes the same with tokenizer.json as with tokenizer.model (add_dummy_prefix and whitespace).

    SentencePiece puts a "▁" before the text (add_dummy_prefix) so that "Hello" at the start is the same piece as
    " Hello" elsewhere. A tokenizer.json whose normalizer / pre-tokenizer does not (Metaspace with
    prepend_scheme "never", a dropped Prepend) or adds it where the model says not to, gives every prompt a
    different first token than training did. The finding says whether flipping the dummy prefix explains the
    difference.

    Remedy: re-convert tokenizer.json, or fix its normalizer (Prepend "▁") / pre-tokenizer (Metaspace).
    """
    model = _spm_or_skip(ctx)
    tok = _json_or_skip(ctx)
    declared = _declared_or_skip(ctx)
    quirk = src.metaspace_skips_leading_space(src.token_table_raw(ctx).get("pre_tokenizer"))
    probes = [p for p in src.PLAIN_PROBES if not (quirk and p[:1].isspace())]
    difference = src.smallest_difference(tok, declared, probes)
    if difference is None:
        leading = src.smallest_difference(tok, declared, src.PLAIN_PROBES)
        if leading is not None and not _reported_elsewhere(ctx, model, tok, src.PLAIN_PROBES):
            yield Problem("tokenizer.json's Metaspace pre-tokenizer adds no dummy prefix to text that already starts "
                          "with a space, sentencepiece always adds it (tokenizers' rule, which transformers' own "
                          "legacy=false conversion inherits; prompts rarely start with a space): "
                          + leading.describe("tokenizer.json", src.spm_label(ctx, leading.text)), severity="info",
                          evidence=leading.evidence("tokenizer.json", "tokenizer.model"),
                          location=Location(file="tokenizer.json", logical="pre_tokenizer"))
        return
    if _reported_elsewhere(ctx, model, tok, probes):
        return
    prefix = ctx.tokenizer_config.get("add_prefix_space")
    prefix = model.add_dummy_prefix if not isinstance(prefix, bool) else prefix
    flipped = src.spm_tokenizer(ctx, add_prefix_space=not prefix)
    explained = src.smallest_difference(tok, flipped, probes) is None
    cause = (f"tokenizer.json {'does not add' if prefix else 'adds'} the dummy prefix '▁' that tokenizer.model's "
             f"add_dummy_prefix = {model.add_dummy_prefix} {'asks for' if prefix else 'leaves out'}"
             if explained else "plain text encodes differently with tokenizer.json and tokenizer.model")
    yield Problem(f"{cause}: {difference.describe('tokenizer.json', src.spm_label(ctx, difference.text))}",
                  evidence={"add_dummy_prefix": model.add_dummy_prefix, "explained_by_prefix": explained,
                            **difference.evidence("tokenizer.json", "tokenizer.model")},
                  location=Location(file="tokenizer.json", logical="normalizer"))


def _reported_elsewhere(ctx, model, tok, probes) -> bool:
    """A plain-text difference that TOK020 (pieces), TOK021 (byte_fallback) or TOK023 (legacy, which also decides
    how a leading space is prefixed) already explains."""
    if any(tok.id_to_token(i) != piece for i, piece in enumerate(model.pieces)):
        return True
    if bool(src.token_table_raw(ctx).get("model", {}).get("byte_fallback", False)) != bool(model.byte_fallback):
        return True
    flipped = src.spm_tokenizer(ctx, legacy=ctx.tokenizer_config.get("legacy") is False)
    return src.smallest_difference(tok, flipped, probes) is None


@check("TOK023", category="tokenizer", severity="warning", needs=("files",),
       hint="Make tokenizer_config.json's `legacy` say what tokenizer.json does (or re-convert with "
            "from_slow=True and the intended legacy value).")
def legacy_agrees(ctx):
    """Text after a special token encodes as tokenizer_config.json's `legacy` flag declares.

    transformers' `legacy` (PR #24565, transformers#25073) decides whether text after a special token gets
    SentencePiece's dummy "▁": legacy=true gives "<s>Hello" -> <s> "▁Hello", legacy=false <s> "Hello". The
    slow tokenizer and converters follow the flag, the fast tokenizer follows whatever tokenizer.json was
    written with, so training and inference tokenize chat prompts differently (llama.cpp#7094). An absent flag
    means true in transformers 4 (with a warning) and false in transformers 5's LlamaTokenizer.

    Remedy: set legacy to what tokenizer.json encodes, or regenerate tokenizer.json for the declared value.
    """
    model = _spm_or_skip(ctx)
    tok = _json_or_skip(ctx)
    declared = _declared_or_skip(ctx)
    specials = [p for p, t in zip(model.pieces, model.types) if t == 3][:6]
    probes = [f"{s}{text}" for s in specials for text in ("a", "Hello", " a")]
    probes += [f"a{s}b" for s in specials] + [f"Hi{s} there" for s in specials]
    difference = src.smallest_difference(tok, declared, probes, add_special_tokens=False)
    if difference is None:
        return
    legacy = ctx.tokenizer_config.get("legacy")
    flipped = src.spm_tokenizer(ctx, legacy=legacy is False)
    if src.smallest_difference(tok, flipped, probes) is not None:
        if src.smallest_difference(tok, declared, src.PLAIN_PROBES) is None:   # else TOK020/TOK022 explain it
            yield Problem("text next to special tokens encodes differently with tokenizer.json than transformers "
                          "reads tokenizer.model under tokenizer_config.json's flags, and neither legacy setting "
                          "explains it: " + difference.describe("tokenizer.json", src.TRANSFORMERS_READING),
                          evidence={"legacy": legacy, **difference.evidence("tokenizer.json", "tokenizer.model")},
                          location=Location(file="tokenizer.json", logical="pre_tokenizer"))
        return
    said = "does not declare legacy (transformers 4 reads it as true)" if legacy is None \
        else f"declares legacy = {str(legacy).lower()}"
    yield Problem(f"tokenizer_config.json {said} but tokenizer.json encodes as legacy = "
                  f"{str(legacy is False).lower()}: {difference.describe('tokenizer.json', 'the declared flag')}",
                  evidence={"legacy": legacy, **difference.evidence("tokenizer.json", "declared")},
                  location=Location(file="tokenizer_config.json", logical="legacy"))


@check("TOK024", category="tokenizer", severity="warning", needs=("files", "tokenizer"),
       hint="Make tokenizer.json's post_processor add BOS/EOS exactly as tokenizer_config.json's add_bos_token / "
            "add_eos_token declare.")
def bos_eos_flags_agree(ctx):
    """tokenizer_config.json's add_bos_token / add_eos_token match what tokenizer.json's post-processor adds.

    The fast tokenizer adds what its post-processor template says and, depending on the version and class,
    ignores the flags (transformers#30947); llama.cpp's converter and other stacks read the flags. When they
    disagree, one stack sends BOS and another does not, or every prompt ends with EOS and generation stops at
    once.

    Remedy: regenerate the post-processor from the flags (transformers' update_post_processor) or fix the flags.
    """
    tok = _json_or_skip(ctx)
    for flag, token_id, actual in (("add_bos_token", tok.bos_token_id, tok.add_bos_token),
                                   ("add_eos_token", tok.eos_token_id, tok.add_eos_token)):
        declared = ctx.tokenizer_config.get(flag)
        if not isinstance(declared, bool) or declared == actual or token_id is None:
            continue
        ids = tok.encode("a")
        yield Problem(f"tokenizer_config.json declares {flag} = {str(declared).lower()} but tokenizer.json's "
                      f"post-processor {'adds' if actual else 'does not add'} it: 'a' encodes to {ids}",
                      evidence={flag: declared, "input": "a", "encoded": ids, "token_id": token_id},
                      location=Location(file="tokenizer_config.json", logical=flag))


@check("TOK025", category="tokenizer", severity="warning", needs=("files",),
       hint="Make tokenizer.model's trainer_spec ids, tokenizer_config.json, config.json and generation_config.json "
            "name the same BOS/EOS/UNK/PAD ids.")
def trainer_special_ids_agree(ctx):
    """The BOS/EOS/UNK/PAD ids of tokenizer.model's trainer spec match the other files' special ids.

    sentencepiece-based stacks (mistral-common, llama.cpp's converter) take bos_id/eos_id from the trainer spec,
    transformers from tokenizer_config.json, generate() from generation_config.json. A fine-tune that changed
    one of them stops or starts sequences on different tokens depending on the stack.

    Remedy: bring the files in line with the id the model was trained with.
    """
    model = _spm_or_skip(ctx)
    others = {}
    tok = src.json_tokenizer(ctx)
    if tok is not None:
        others["tokenizer.json"] = {r: getattr(tok, f"{r}_token_id") for r, _ in ROLES}
    for file in ("config.json", "generation_config.json"):
        raw = _read_optional(ctx, file)
        others[file] = {r: raw.get(f"{r}_token_id") for r, _ in ROLES}
    for role, field in ROLES:
        trained = model.trainer[field]
        if not 0 <= trained < len(model.pieces):
            continue
        for file, ids in others.items():
            value = ids.get(role)
            values = value if isinstance(value, list) else [value]
            if value is None or trained in values:
                continue
            where = "tokenizer_config.json" if file == "tokenizer.json" else file
            yield Problem(f"{role} is id {trained} ({model.pieces[trained]!r}) in tokenizer.model's trainer spec but "
                          f"{value} in {where}", evidence={"role": role, "tokenizer.model": trained, where: value},
                          location=Location(file=where, logical=f"{role}_token" if file == "tokenizer.json"
                                            else f"{role}_token_id"))


def _read_optional(ctx, name: str) -> dict:
    from reference_engine.config import read_json
    path = src.source_root(ctx) / name
    try:
        raw = read_json(path) if path.is_file() else {}
    except ModelDirError:
        return {}
    return raw if isinstance(raw, dict) else {}
