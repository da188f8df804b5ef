"""Hostile inputs: huge runs, control characters, surrogates, ZWJ emoji, special-token look-alikes.

Long inputs double as the linear-time guard: a quadratic pre-tokenizer regex or BPE loop would take
minutes on a 1 MB run (benchmarks/tokenizer.py prints the time per MB from 1 KB to 1 MB).
"""
from __future__ import annotations

import json

import pytest

from reference_engine.tokenizer.tokenizer import InvalidTextError
from tests.reference_engine.tokenizer import tokenizer_cases as cases

CONTROL = "".join(chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)])
HOSTILE = {
    "empty": "",
    "nul": "\x00",
    "controls": CONTROL,
    "controls_spaced": " ".join(CONTROL),
    "zwj_emoji": "👨‍👩‍👧‍👦 🏳️‍🌈 👩🏽‍💻 🧑‍🤝‍🧑 ❤️‍🔥" * 3,
    "mixed_scripts": "English Ελληνικά Русский עברית العربية हिन्दी ไทย 中文 日本語 한국어 ᚠᚢᚦ 𝔘𝔫𝔦",
    "combining": "e\u0301\u0302\u0303\u0304" * 50 + "Z\u0351\u0352\u0353" * 30,
    "special_lookalikes": "<|endoftext|> <|endoftext| |endoftext|> <|im_start|><|im_end|>< |im_start|>"
                          "<s></s><unk><<s>>",
    "bidi_and_invisibles": "\u202eevil\u202c \u200b\u200c\u200d\ufeff\u2060 \u00ad",
    "noncharacters": "\ufffe\uffff\U0010ffff\U000e0001",
    "long_word_mixed": ("abc123!?" * 4000),
    "runs_of_newlines": "\n" * 5000 + "x" + "\r\n" * 3000,
    "spaces_100k": " " * 100_000,
    "one_char_200k": "a" * 200_000,
    "cjk_no_spaces_50k": "漢字仮名交じり文" * 6250,
    "digits_100k": "7" * 100_000,
    "punctuation_100k": "!" * 100_000,
}


@pytest.fixture(scope="module")
def tokenizers():
    return {family: (cases.ours(family), cases.hf(family)) for family in cases.FAMILIES}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_inputs_match_hugging_face(tokenizers, name):
    text = HOSTILE[name]
    for family, (ours, hf) in tokenizers.items():
        ids = hf.encode(text).ids
        assert ours.encode(text) == ids, family
        assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=False), family


def test_one_megabyte_of_one_character(tokenizers):
    ours, hf = tokenizers["qwen2"]
    text = "a" * 1_000_000
    assert ours.encode(text) == hf.encode(text).ids


def test_lone_surrogates_are_a_clear_error(tokenizers):
    text = json.loads('"abc \\ud800 def \\udfff"')  # how a lone surrogate arrives: escaped in JSON
    for ours, _ in tokenizers.values():
        with pytest.raises(InvalidTextError, match="lone surrogate"):
            ours.encode(text)


def test_batch_of_hostile_inputs_keeps_invariants(tokenizers):
    ours, _ = tokenizers["llama3"]
    assert ours.validate(list(HOSTILE.values())[:10]) == []
