"""Each tokenizer.json component against the same component in Hugging Face `tokenizers`.

Components are built with the tokenizers Python API, serialised with `to_str()`, and the JSON entry
is handed to our builder, so both sides read exactly the same configuration.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st
from tokenizers import Regex, Tokenizer as HFTokenizer, decoders, models, normalizers, pre_tokenizers

from reference_engine.tokenizer.pipeline.decoders import build_decoder
from reference_engine.errors import UnsupportedError
from reference_engine.tokenizer.pipeline.normalizers import build_normalizer
from reference_engine.tokenizer.pipeline.pre_tokenizers import Piece, build_pre_tokenizer
from reference_engine.tokenizer.tokenizer import Tokenizer


def spec_of(field: str, component) -> dict:
    tok = HFTokenizer(models.BPE())
    setattr(tok, field, component)
    return json.loads(tok.to_str())[field]


TRICKY = st.text(alphabet=st.sampled_from(list("ab Z9٣ \t\n▁-_,.'日😀é\u0301ﬁＡ")), max_size=30)
SAMPLES = ["Hello  world", " lead", "trail ", "  ", "", "a-b--c", "x▁y ▁z", "It's 42 ٣٣ apples!", "ﬁＡé\u0301"]

NORMALIZERS = {
    "nfc": normalizers.NFC(), "nfd": normalizers.NFD(), "nfkc": normalizers.NFKC(), "nfkd": normalizers.NFKD(),
    "lowercase": normalizers.Lowercase(), "prepend": normalizers.Prepend("▁"),
    "replace_str": normalizers.Replace(" ", "▁"), "replace_regex": normalizers.Replace(Regex(r"\s+"), " "),
    "strip": normalizers.Strip(), "strip_left": normalizers.Strip(left=True, right=False),
    "sequence": normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Prepend("▁")]),
}


@pytest.mark.parametrize("name", list(NORMALIZERS))
def test_normalizers(name):
    hf = NORMALIZERS[name]
    ours = build_normalizer(spec_of("normalizer", hf), "t.json")
    for text in SAMPLES:
        assert ours(text) == hf.normalize_str(text), text


PRE_TOKENIZERS = {
    "byte_level": pre_tokenizers.ByteLevel(add_prefix_space=False),
    "byte_level_prefix": pre_tokenizers.ByteLevel(add_prefix_space=True),
    "byte_level_no_regex": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    "metaspace_first": pre_tokenizers.Metaspace(prepend_scheme="first"),
    "metaspace_always": pre_tokenizers.Metaspace(prepend_scheme="always"),
    "metaspace_never": pre_tokenizers.Metaspace(prepend_scheme="never"),
    "metaspace_no_split": pre_tokenizers.Metaspace(prepend_scheme="always", split=False),
    "digits": pre_tokenizers.Digits(individual_digits=False),
    "digits_individual": pre_tokenizers.Digits(individual_digits=True),
    "whitespace_split": pre_tokenizers.WhitespaceSplit(),
    "whitespace": pre_tokenizers.Whitespace(),
    "sequence": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                         pre_tokenizers.ByteLevel(add_prefix_space=False)]),
    **{f"split_{behavior}_{invert}": pre_tokenizers.Split(Regex(r"-+|\s"), behavior, invert=invert)
       for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous")
       for invert in (False, True)},
    "split_string": pre_tokenizers.Split("-", "merged_with_next"),
}


def _pieces(pre_tokenizer, text):
    return [p.text for p in pre_tokenizer([Piece(text, True)])]


@pytest.mark.parametrize("name", list(PRE_TOKENIZERS))
def test_pre_tokenizers(name):
    hf = PRE_TOKENIZERS[name]
    ours = build_pre_tokenizer(spec_of("pre_tokenizer", hf), "t.json")
    for text in SAMPLES:
        assert _pieces(ours, text) == [p for p, _ in hf.pre_tokenize_str(text)], text


@settings(max_examples=150, deadline=None)
@given(TRICKY, st.sampled_from(sorted(PRE_TOKENIZERS)))
def test_pre_tokenizers_on_arbitrary_text(text, name):
    hf = PRE_TOKENIZERS[name]
    ours = build_pre_tokenizer(spec_of("pre_tokenizer", hf), "t.json")
    assert _pieces(ours, text) == [p for p, _ in hf.pre_tokenize_str(text)]


DECODERS = {
    "byte_level": decoders.ByteLevel(),
    "metaspace_first": decoders.Metaspace(prepend_scheme="first"),
    "metaspace_never": decoders.Metaspace(prepend_scheme="never"),
    "byte_fallback": decoders.ByteFallback(),
    "fuse": decoders.Fuse(),
    "strip": decoders.Strip(" ", 1, 1),
    "replace": decoders.Replace("▁", " "),
    "llama2_chain": decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)]),
}
TOKEN_LISTS = [["▁Hello", "▁world", "!"], ["ĠHello", "Ġworld", "Ċ", "ðŁĺ", "Ģ"], ["<0xE6>", "<0x97>", "<0xA5>", "x"],
               ["<0xE6>", "<0x97>", "▁a"], ["▁▁a", "▁"], [" x ", "  "], ["<0xZZ>", "<0x41>"], []]


@pytest.mark.parametrize("name", list(DECODERS))
def test_decoders(name):
    hf = DECODERS[name]
    ours = build_decoder(spec_of("decoder", hf), "t.json")
    for tokens in TOKEN_LISTS:
        assert "".join(ours(tokens)) == hf.decode(tokens), tokens


@pytest.mark.parametrize("field, spec, named", [
    ("normalizer", {"type": "BertNormalizer"}, "BertNormalizer"),
    ("normalizer", {"type": "Precompiled", "precompiled_charsmap": ""}, "Precompiled"),
    ("pre_tokenizer", {"type": "UnicodeScripts"}, "UnicodeScripts"),
    ("decoder", {"type": "WordPiece"}, "WordPiece"),
    ("post_processor", {"type": "Mystery"}, "Mystery"),
])
def test_unsupported_components_are_named(field, spec, named):
    full = {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, field: spec}
    with pytest.raises(UnsupportedError, match=named):
        Tokenizer.from_json(full)
