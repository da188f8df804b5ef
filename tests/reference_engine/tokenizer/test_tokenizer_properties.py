"""Property tests on the factory tokenizers: same ids as Hugging Face on arbitrary text, lossless
byte-level round trips, stable detokenization of every id, every code point round-trips.

Exceptions, each by design rather than a weakened property:
- qwen2 has an NFC normalizer: decode(encode(s)) == NFC(s), not s.
- SentencePiece-style with Metaspace(prepend_scheme="first") (spm): the encoder prepends "▁" only
  when the text does not already start with a space, but the decoder always drops the first meta
  space, so text that starts with a space loses it (llama.cpp's "leading-space ambiguity"; the
  legacy Prepend normalizer of spm_legacy always prepends and so round-trips it).
- Both SentencePiece-style layouts turn " " into "▁", so a "▁" in the input comes back as " ".
"""
from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from tests.reference_engine.tokenizer import tokenizer_cases as cases

BYTE_LEVEL = ("gpt2", "llama3", "qwen2")
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
MIXED_TEXT = st.lists(st.sampled_from(cases.CORPUS_LINES + cases.SPECIALS + ["  ", "\n", "▁", "'s", "1234"]),
                      max_size=4).map("".join)


@pytest.fixture(scope="module")
def tokenizers():
    return {family: (cases.ours(family), cases.hf(family)) for family in cases.FAMILIES}


@settings(max_examples=1500, deadline=None)
@given(text=st.one_of(ANY_TEXT, MIXED_TEXT), family=st.sampled_from(cases.FAMILIES))
def test_ids_equal_hugging_face(tokenizers, text, family):
    ours, hf = tokenizers[family]
    ids = hf.encode(text).ids
    assert ours.encode(text) == ids
    assert ours.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False).ids
    assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=False)
    assert ours.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT, family=st.sampled_from(BYTE_LEVEL))
def test_byte_level_decode_encode_is_lossless(tokenizers, text, family):
    ours, _ = tokenizers[family]
    expected = unicodedata.normalize("NFC", text) if family == "qwen2" else text  # documented exception
    assert ours.decode(ours.encode(text, add_special_tokens=False)) == expected


@settings(max_examples=200, deadline=None)
@given(text=ANY_TEXT.filter(lambda s: "▁" not in s))
def test_sentencepiece_round_trip_outside_documented_exceptions(tokenizers, text):
    for family in ("spm", "spm_legacy"):
        ours, _ = tokenizers[family]
        expected = text[1:] if family == "spm" and text.startswith(" ") else text
        assert ours.decode(ours.encode(text), skip_special_tokens=True) == expected


def test_sentencepiece_documented_exceptions(tokenizers):
    spm, legacy = tokenizers["spm"][0], tokenizers["spm_legacy"][0]
    assert spm.decode(spm.encode(" lead"), skip_special_tokens=True) == "lead"  # leading space lost
    assert legacy.decode(legacy.encode(" lead"), skip_special_tokens=True) == " lead"  # kept
    for ours in (spm, legacy):
        assert ours.decode(ours.encode("a▁b"), skip_special_tokens=True) == "a b"  # meta space is a space


@pytest.mark.parametrize("family", cases.FAMILIES)
def test_every_id_detokenize_tokenize_detokenize_is_stable(tokenizers, family):
    """llama.cpp's test-tokenizer-1 invariant: text(id) -> ids -> text is a fixed point."""
    ours, _ = tokenizers[family]
    for token_id in range(len(ours)):
        text = ours.decode([token_id])
        again = ours.decode(ours.encode(text, add_special_tokens=False))
        if family == "spm" and text.startswith(" "):
            continue  # leading-space ambiguity, see module docstring
        assert again == text, (token_id, ours.id_to_token(token_id))


# Exhaustive over all 1,112,064 scalar values for two byte-level tokenizers (5 s each); the others
# take the whole BMP plus every 61st supplementary code point, because above the BMP every character
# goes through the same path (byte-level alphabet or <0xXX> byte fallback) and the full range costs
# 15 s per SentencePiece tokenizer.
EXHAUSTIVE = ("gpt2", "qwen2")


def _code_points(family: str) -> list[str]:
    upper = range(0x10000, sys.maxunicode + 1) if family in EXHAUSTIVE else range(0x10000, sys.maxunicode + 1, 61)
    return [chr(c) for c in [*range(0x10000), *upper] if not 0xD800 <= c <= 0xDFFF]


@pytest.mark.parametrize("family", cases.FAMILIES)
def test_every_code_point_round_trips(tokenizers, family):
    """Code points in batches of 4096 joined into one text per batch."""
    ours, _ = tokenizers[family]
    points = _code_points(family)
    for start in range(0, len(points), 4096):
        text = "".join(points[start:start + 4096])
        if family == "qwen2":
            text = unicodedata.normalize("NFC", text)  # documented exception: NFC normalizer
        decoded = ours.decode(ours.encode(text), skip_special_tokens=True)
        if family.startswith("spm"):
            text = text.replace("▁", " ")  # documented exception: U+2581 is the meta space
        assert decoded == text, start
