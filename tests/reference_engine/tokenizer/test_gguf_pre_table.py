"""tokenizer/sources/gguf_pre.py against its source: llama.cpp's src/llama-vocab.cpp from the llama-cpp-python sdist the
vocab vectors come from. Every `tokenizer.ggml.pre` name we accept has llama.cpp's regex list (string for
string) and flags (ignore_merges, add_bos, clean_spaces); every name llama.cpp knows and we refuse is listed
in NOT_TRANSCRIBED with the reason. The vectors (test_gguf_tokenizer.py) cover the names with test files."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reference_engine.tokenizer.sources.gguf_pre import NOT_TRANSCRIBED, PRE_TOKENIZERS, REGEXES, pre_tokenizer_for
from tests import assets, assets_gguf
from tests.conftest import _asset

pytestmark = pytest.mark.assets

CPP_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


def cpp_literal(line: str) -> str:
    """The first C++ string literal on the line, escapes decoded."""
    start = line.index('"') + 1
    out, i = [], start
    while line[i] != '"':
        if line[i] == "\\":
            out.append(CPP_ESCAPES[line[i + 1]])
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


@dataclass
class CppPre:
    pre_type: str
    flags: dict = field(default_factory=dict)


def cpp_names(source: str) -> dict[str, CppPre]:
    """tokenizer.ggml.pre name -> (LLAMA_VOCAB_PRE_TYPE_*, the flags its branch sets) from llama_vocab::impl::load's
    BPE branch; the BPE defaults (clean_spaces true, the rest false) filled in."""
    start = source.index("if (type == LLAMA_VOCAB_TYPE_BPE) {")
    body = source[start:source.index("} else if (type == LLAMA_VOCAB_TYPE_SPM)", start)]
    table: dict[str, CppPre] = {}
    for branch in re.split(r"\}\s*else if\s*\(", body)[1:]:
        names = re.findall(r'tokenizer_pre == "([^"]+)"', branch)
        kind = re.search(r"pre_type = LLAMA_VOCAB_PRE_TYPE_(\w+);", branch)
        if not names or kind is None:
            continue
        flags = {"clean_spaces": True, "ignore_merges": False, "add_bos": False}
        flags.update({k: v == "true" for k, v in re.findall(r"\b(\w+) = (true|false);", branch)})
        for name in names:
            table[name] = CppPre(kind.group(1), flags)
    return table


@dataclass
class CppRegexes:
    exprs: tuple[str, ...]
    byte_encode: bool
    originals: tuple[str, ...]    # the tokenizer.json regexes quoted in comments ("original regex from ...")


def cpp_regexes(source: str) -> dict[str, CppRegexes]:
    """LLAMA_VOCAB_PRE_TYPE_* (and "DEFAULT") -> its regex_exprs, byte_encode and the commented originals, from
    llm_tokenizer_bpe's constructor."""
    start = source.index("struct llm_tokenizer_bpe : llm_tokenizer {")
    lines = source[start:source.index("bool byte_encode", start)].splitlines()
    out, pending, exprs, originals, byte_encode = {}, [], [], [], True
    for raw in lines:
        line = raw.strip()
        if m := re.match(r"case LLAMA_VOCAB_PRE_TYPE_(\w+):", line):
            pending.append(m.group(1))
        elif line == "default:":
            pending.append("DEFAULT")
        elif line.startswith("regex_exprs = {"):
            exprs = []
        elif line.startswith('"'):
            exprs.append(cpp_literal(line))
        elif line.startswith("//") and '"' in line:
            originals.append(cpp_literal(line))
        elif line.startswith("byte_encode = false"):
            byte_encode = False
        elif line == "break;" and pending:
            out.update({kind: CppRegexes(tuple(exprs), byte_encode, tuple(originals)) for kind in pending})
            pending, originals, byte_encode = [], [], True
    return out


@pytest.fixture(scope="module")
def cpp():
    source = Path(_asset(assets_gguf.llamacpp_vocab_source)).read_text(encoding="utf-8")
    names, regexes = cpp_names(source), cpp_regexes(source)
    assert len(names) > 80 and len(regexes) > 40 and "DEFAULT" in regexes   # the parser found the tables
    return names, regexes


def test_every_accepted_name_has_llama_cpp_regexes_and_flags(cpp):
    names, regexes = cpp
    wrong = {}
    for name, entry in PRE_TOKENIZERS.items():
        if name == "default":
            continue
        theirs = names.get(name)
        if theirs is None:
            wrong[name] = "not a llama.cpp pre-tokenizer"
            continue
        found = regexes.get(theirs.pre_type, regexes["DEFAULT"])
        exprs, byte_encode = found.exprs, found.byte_encode
        ours_flags = {"clean_spaces": entry.clean_spaces, "ignore_merges": entry.ignore_merges,
                      "add_bos": entry.add_bos}
        theirs_flags = {k: theirs.flags[k] for k in ours_flags}
        if REGEXES[entry.regex_kind] != exprs:
            wrong[name] = f"regexes of {entry.regex_kind!r} differ from {theirs.pre_type}"
        elif ours_flags != theirs_flags:
            wrong[name] = f"flags {ours_flags} != llama.cpp {theirs_flags}"
        elif not byte_encode or theirs.flags.get("escape_whitespaces"):
            wrong[name] = "llama.cpp runs it without byte encoding / with escaped whitespace"
    assert wrong == {}


def test_every_other_llama_cpp_name_is_refused_with_a_reason(cpp):
    names, _ = cpp
    refused = set(names) - set(PRE_TOKENIZERS)
    assert refused == set(NOT_TRANSCRIBED)
    assert all(pre_tokenizer_for(name) is None for name in refused)


def test_the_missing_name_is_llama_cpp_default_with_its_regexes(cpp):
    _, regexes = cpp
    entry = pre_tokenizer_for(None)
    assert entry.regex_kind == "default" and REGEXES["default"] == regexes["DEFAULT"].exprs


# ---- the regexes against the tokenizers library running the original tokenizer.json regexes ------------------

def _ours(kind: str):
    from reference_engine.tokenizer.pipeline.pre_tokenizers import Piece, build_pre_tokenizer
    run = build_pre_tokenizer({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in REGEXES[kind]]},
        "gguf_pre")
    return lambda text: [p.text for p in run([Piece(text, True)])]


def _hf(originals: tuple[str, ...]):
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt
    run = pt.Sequence([pt.Split(Regex(r), "isolated") for r in originals])
    return lambda text: [piece for piece, _ in run.pre_tokenize_str(text)]


EXTRA_TEXTS = ["HelloWorld McDonald's I'M you'RE iPhone 1234567 x=1+2; αβγ ΑΒΓ école ÉCOLE Ünïcode ǅemal",
               "a\u0301b\u0300 CAFÉ café 你好世界 こんにちは 안녕하세요 ١٢٣ 𝐀𝐁 ﬁne",
               "\r\n\r\n\t  x  \n\n y\u3000z"]
# llama.cpp's stand-in for \p{Lu}*\p{Ll}+ (letters not a-z, then letters not A-Z) and its letter class without
# \p{M} differ from the originals on non-ASCII capitals ("ÉCOLE" -> " É", "COLE") and combining marks (Khmer):
# we reproduce llama.cpp, so these kinds are compared on ASCII text only
LLAMA_CPP_ADAPTED = {"tekken", "gpt-4o"}


@pytest.fixture(scope="module")
def texts():
    models = assets_gguf.llamacpp_sdist() / "models"
    found = {t for f in sorted(models.glob("ggml-vocab-*.gguf.inp"))
             for t in f.read_text(encoding="utf-8").split(assets.VOCAB_TEST_SEPARATOR)}
    return sorted(found | set(EXTRA_TEXTS))


def test_transcribed_regexes_split_as_the_originals_do(cpp, texts):
    """Where llama-vocab.cpp quotes the tokenizer.json regex it adapted (one per expression), our split of the
    adapted list equals the tokenizers library's split with the originals (Oniguruma, case-insensitive groups,
    possessive quantifiers) on every vocab test string of the sdist."""
    names, regexes = cpp
    kinds = {}
    for name, entry in PRE_TOKENIZERS.items():
        found = regexes.get(names[name].pre_type) if name in names else None
        if found is not None and found.originals and len(found.originals) == len(found.exprs):
            kinds.setdefault(entry.regex_kind, found.originals)
    assert {"llama3", "qwen2", "qwen35", "jais2", "bailingmoe", "seed-coder", "exaone-moe", "tekken",
            "gpt-4o"} <= set(kinds)
    wrong = {}
    for kind, originals in kinds.items():
        ours, theirs = _ours(kind), _hf(originals)
        cases = [t for t in texts if t.isascii()] if kind in LLAMA_CPP_ADAPTED else texts
        bad = [t for t in cases if ours(t) != theirs(t)]
        if bad:
            wrong[kind] = bad[0][:80]
    assert wrong == {}


def test_tekken_follows_llama_cpp_not_the_original_on_non_ascii_capitals():
    """llama.cpp collapses every non-ASCII letter to one class, neither a-z nor A-Z: "ÉCOLE" is " É" + "COLE"."""
    assert _ours("tekken")(" ÉCOLE") == [" É", "COLE"]
    assert _ours("tekken")(" Hello World") == [" Hello", " World"]


# ---- every kind through the real GGUF tokenizer path -----------------------------------------------------------

ONE_NAME_PER_KIND = sorted({entry.regex_kind: name for name, entry in sorted(PRE_TOKENIZERS.items())}.values())


@pytest.fixture(scope="module")
def gpt2_vocab():
    return _asset(assets_gguf.llamacpp_vocab_gguf, "gpt-2")


@pytest.mark.parametrize("pre", ONE_NAME_PER_KIND)
def test_each_kind_loads_from_a_gguf_and_round_trips(gpt2_vocab, pre, tmp_path):
    """GPT-2's vocabulary relabelled with each pre-tokenizer: it loads, and decode(encode(text)) is the text for
    every vocab test string (a regex that dropped or duplicated characters would break it)."""
    from reference_engine.tokenizer.tokenizer import Tokenizer
    from tests.checks.zoo_gguf import rewrite_metadata
    path = rewrite_metadata(gpt2_vocab.gguf, tmp_path / "v.gguf", {"tokenizer.ggml.pre": pre})
    tok = Tokenizer.from_pretrained(path)
    bad = [t for t in gpt2_vocab.inputs if tok.decode(tok.encode(t, add_special_tokens=False)) != t]
    assert bad == []


@pytest.mark.parametrize("pre", ["kimi-k2", "gemma4"])
def test_a_name_not_transcribed_is_refused(gpt2_vocab, pre, tmp_path):
    from reference_engine.errors import UnsupportedError
    from reference_engine.tokenizer.tokenizer import Tokenizer
    from tests.checks.zoo_gguf import rewrite_metadata
    path = rewrite_metadata(gpt2_vocab.gguf, tmp_path / "v.gguf", {"tokenizer.ggml.pre": pre})
    with pytest.raises(UnsupportedError, match=pre):
        Tokenizer.from_pretrained(path)
