"""Tokenizer-source checks on the other files (TOK026-TOK028): chat templates kept in several places, a tiktoken
vocabulary (Llama 3's original tokenizer.model, *.tiktoken) and Mistral's tekken.json against tokenizer.json.
Shared readers and the smallest-input search: checks/tokenizer/source_compare.py."""
from __future__ import annotations

import regex

from checks.tokenizer import source_compare as src
from checks.catalogue.registry import Problem, Skip, check
from findings import Location
from reference_engine.errors import ModelDirError

# who reads which file (verified in the sources): transformers' from_pretrained lets chat_template.jinja and
# additional_chat_templates/*.jinja override tokenizer_config.json (tokenization_utils_base.py); llama.cpp's
# convert_hf_to_gguf (gguf-py SpecialVocab) keeps tokenizer_config.json's and reads chat_template.jinja, then
# chat_template.json, only when tokenizer_config.json has none; vLLM, TGI and SGLang render transformers' choice.
READERS = {
    "chat_template.jinja": "transformers (and vLLM/TGI/SGLang through it)",
    "tokenizer_config.json": "llama.cpp's convert_hf_to_gguf",
}
SPLIT_PROBES = ("a", "Hi", "I'm", "HTTPServer", "don't", "3.14", "a  b", "x\n\ny", "Ünïcödé", "ABCdef", "über",
                "hello world", "  lead", "'s", "12345", "a\r\nb", "你好", "😀!", "CamelCaseWord", "x/y")


@check("TOK026", category="tokenizer", severity="warning", needs=("files",),
       hint="Keep one chat template: delete the stale copy (tokenizer_config.json's chat_template or "
            "chat_template.jinja) or make them identical.")
def chat_template_sources_agree(ctx):
    """The chat template is the same wherever the directory keeps it.

    A template may live in tokenizer_config.json, chat_template.jinja, chat_template.json and
    additional_chat_templates/<name>.jinja. transformers loads chat_template.jinja over tokenizer_config.json;
    llama.cpp's converter keeps tokenizer_config.json's and uses chat_template.jinja only when the config has
    none. When the copies differ, a GGUF and a transformers/vLLM deployment of the same model render different
    prompts. The finding shows the first conversation the copies render differently.

    Remedy: keep a single source of the template.
    """
    if ctx.is_gguf:
        raise Skip("a GGUF carries one template (tokenizer.chat_template)")
    from reference_engine.tokenizer.chat_template import render_chat_template
    sources = src.template_sources(src.source_root(ctx), ctx.tokenizer_config)
    for name, copies in sorted(sources.items()):
        texts = list(dict.fromkeys(copies.values()))
        if len(texts) < 2:
            continue
        files = list(copies)
        first, second = files[0], next(f for f in files[1:] if copies[f] != copies[files[0]])
        shown = _first_render_difference(render_chat_template, copies[first], copies[second], ctx)
        readers = "; ".join(f"{READERS[f]} uses {f}" for f in (first, second) if f in READERS)
        yield Problem(f"chat template {name!r} differs between {first} and {second}"
                      + (f" ({readers})" if readers else "") + (f": {shown['summary']}" if shown else
                                                                 ": the texts differ (same render on the probes)"),
                      evidence={"template": name, "sources": files, **(shown or {})},
                      severity=None if shown else "info",
                      location=Location(file=second, logical=f"chat_template[{name}]"))


def _first_render_difference(render, left: str, right: str, ctx) -> dict | None:
    bos, eos = ctx.tokenizer_config.get("bos_token"), ctx.tokenizer_config.get("eos_token")
    special = {"bos_token": bos if isinstance(bos, str) else "<s>",
               "eos_token": eos if isinstance(eos, str) else "</s>"}
    for messages in src.TEMPLATE_CONVERSATIONS:
        outputs = []
        for template in (left, right):
            try:
                outputs.append(render(template, messages, add_generation_prompt=True, special_tokens=special))
            except ModelDirError as e:
                outputs.append(f"<error: {e.problem}>")
        if outputs[0] != outputs[1]:
            at = next((i for i, (a, b) in enumerate(zip(*outputs)) if a != b), min(map(len, outputs)))
            window = [o[max(0, at - 20):at + 40] for o in outputs]
            return {"messages": messages, "renders": window,
                    "summary": f"{len(messages)} message(s) render as {window[0]!r} vs {window[1]!r} "
                               f"(from character {at})"}
    return None


def _tiktoken_files(ctx) -> list:
    from reference_engine.tokenizer.sources.tiktoken_file import looks_like_tiktoken
    root = src.source_root(ctx)
    candidates = [root / "tokenizer.model", root / "original" / "tokenizer.model", *sorted(root.glob("*.tiktoken"))]
    return [p for p in candidates if p.is_file() and looks_like_tiktoken(p)]


def _json_bytes_or_skip(ctx):
    from checks.shared.token_table import token_table
    tok = src.json_tokenizer(ctx)
    if tok is None:
        raise Skip("no tokenizer.json to compare with")
    return tok, src.id_to_json_bytes(tok, token_table(ctx).is_byte_level())


def _compare_ids(expected: dict[int, bytes], actual: dict[int, bytes], model_ids=()) -> list[int]:
    """Ids whose bytes differ, and ids of tokenizer.json's model vocabulary the other file lacks."""
    return sorted({i for i, b in expected.items() if actual.get(i) != b} | {i for i in model_ids if i not in expected})


@check("TOK027", category="tokenizer", severity="error", needs=("files",),
       hint="Regenerate tokenizer.json from the tiktoken file (transformers' TikTokenConverter) or drop the stale "
            "file.")
def tiktoken_ranks_agree(ctx):
    """A tiktoken vocabulary (base64 token + rank per line; Llama 3's original tokenizer.model) gives every rank
    the same bytes as tokenizer.json's id.

    Llama 3's original release ships tokenizer.model in tiktoken format next to tokenizer.json (sentencepiece
    cannot read it, sentencepiece#1054); tools that start from the original file (Meta's reference code,
    tiktoken-based servers, conversion scripts) and tools that read tokenizer.json must agree on every id, or
    one of them feeds the model wrong tokens. A tiktoken file holds no special tokens: ids tokenizer.json
    declares as added or special tokens are left out of the comparison, whether or not its model.vocab lists
    them too (Llama 3's tokenizer.json does).

    Remedy: regenerate one file from the other.
    """
    files = _tiktoken_files(ctx)
    if not files:
        raise Skip("no tiktoken-format file")
    from reference_engine.tokenizer.sources.tiktoken_file import read_tiktoken
    tok, actual = _json_bytes_or_skip(ctx)
    for path in files:
        name = path.relative_to(src.source_root(ctx)).as_posix()
        try:
            vocab = read_tiktoken(path)
        except ModelDirError as e:
            yield Problem(f"{name} does not parse: {e.problem}", location=Location(file=name))
            continue
        added = _added_ids(tok)
        ranks = {i: b for i, b in vocab.tokens.items() if i not in added}
        bad = _compare_ids(ranks, actual, [i for i in tok.model.id_to_token if i not in added])
        if bad:
            yield _id_problem(tok, name, ranks, actual, bad)


def _added_ids(tok) -> set[int]:
    """Ids tokenizer.json declares as added tokens, and the special tokens' ids."""
    return {t.id for t in tok.added_tokens} | set(tok.all_special_ids)


def _id_problem(tok, name: str, expected: dict[int, bytes], actual: dict[int, bytes], bad: list[int]) -> Problem:
    first = bad[0]
    text = (expected.get(first) or actual.get(first) or b"").decode("utf-8", errors="replace")
    encoded = tok.encode(text, add_special_tokens=False)
    cases = [{"id": i, name: expected[i].decode("utf-8", "replace") if i in expected else None,
              "tokenizer.json": (actual.get(i) or b"").decode("utf-8", "replace") if i in actual else None}
             for i in bad[:10]]
    has = f"has {expected[first]!r}" if first in expected else "lacks it"
    return Problem(f"{len(bad)} id(s) differ between {name} and tokenizer.json, e.g. id {first}: {name} {has}, "
                   f"tokenizer.json {actual.get(first)!r}; tokenizer.json encodes {text!r} to "
                   f"{encoded[:8]}", evidence={"count": len(bad), "ids": cases, "input": text, "encoded": encoded[:16]},
                   location=Location(file=name, logical=f"rank[{first}]"))


@check("TOK028", category="tokenizer", severity="error", needs=("files",),
       hint="Regenerate tokenizer.json from tekken.json (mistral-common is the reference; transformers' "
            "fix_mistral_regex repairs the pre-tokenizer regex).")
def tekken_agrees(ctx):
    """Mistral's tekken.json and tokenizer.json give every id the same token and split text with the same regex.

    mistral-common (what Mistral's own stack and vLLM's mistral tokenizer mode use) numbers tekken.json's special
    tokens first and the vocabulary after them; a tokenizer.json converted with another numbering, or with the
    wrong pre-tokenizer regex (transformers PR #42299, `fix_mistral_regex`), encodes text differently from the
    reference. Vocabulary differences are errors; a regex that splits some input differently is a warning with
    that input.

    Remedy: re-convert tokenizer.json from tekken.json.
    """
    path = src.source_root(ctx) / "tekken.json"
    if not path.is_file():
        raise Skip("no tekken.json")
    from reference_engine.tokenizer.sources.tiktoken_file import read_tekken
    tok, actual = _json_bytes_or_skip(ctx)
    try:
        tekken = read_tekken(path)
    except ModelDirError as e:
        yield Problem(f"tekken.json does not parse: {e.problem}", location=Location(file="tekken.json"))
        return
    expected = {**tekken.tokens, **{i: t.encode("utf-8") for i, t in tekken.specials.items() if i in actual}}
    bad = _compare_ids(expected, actual, tok.model.id_to_token)
    if bad:
        yield _id_problem(tok, "tekken.json", expected, actual, bad)
    pattern = _json_split_regex(src.token_table_raw(ctx).get("pre_tokenizer"))
    if tekken.pattern and pattern and pattern != tekken.pattern:
        try:
            ours, theirs = regex.compile(pattern), regex.compile(tekken.pattern)
        except regex.error:
            return
        for text in sorted(SPLIT_PROBES, key=len):
            a, b = ours.findall(text), theirs.findall(text)
            if a != b:
                yield Problem(f"tokenizer.json's pre-tokenizer regex is not tekken.json's: {text!r} splits as {a} "
                              f"with tokenizer.json but {b} with tekken.json (mistral-common)",
                              evidence={"input": text, "tokenizer.json": a, "tekken.json": b}, severity="warning",
                              location=Location(file="tokenizer.json", logical="pre_tokenizer"))
                return


def _json_split_regex(spec) -> str | None:
    """The first Split regex of a tokenizer.json pre-tokenizer (inside a Sequence too)."""
    if not isinstance(spec, dict):
        return None
    if spec.get("type") == "Split":
        return (spec.get("pattern") or {}).get("Regex")
    for child in spec.get("pretokenizers") or []:
        found = _json_split_regex(child)
        if found:
            return found
    return None
