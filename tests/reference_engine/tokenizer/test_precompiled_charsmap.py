"""The precompiled character map of a tokenizer.model, read by hand: a small map trained from a rule table by
sentencepiece's trainer normalizes as sentencepiece does, and corrupt maps (a table of hand-made malformations,
random byte edits) either load and encode without error or fail in one ModelDirError line naming the file, never
another exception or an out-of-bounds walk."""
from __future__ import annotations

import io
import struct

import pytest
import sentencepiece as spm
from hypothesis import given, settings, strategies as st

from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.sources.precompiled_charsmap import VALUE_BIT, read_charsmap
from reference_engine.tokenizer.sources.spm_normalizer import Settings, SpmNormalizer
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests import spm_files

# source code points -> target code points (sentencepiece's normalization_rule_tsv): a full-width letter, a
# ligature, two spaces, a composition (a + combining acute), a circled digit, a deletion
RULES = "FF21\t41\nFB01\t66 69\n3000\t20\n61 301\tE1\n9\t20\n2460\t31\n200B\t\n"
LINES = ["hello world fine files ﬁne", "a quick brown fox", "Ａ full width text"] * 20
PROBES = ["ﬁne Ａ\u3000x a\u0301 \u200b①", "\t\ttabs\t", "aaa\u0301\u0301", "ﬁﬁ Ａ", "\u3000", "plain", "a\u0301"]


def train_small(tmp_path_factory) -> bytes:
    rules = tmp_path_factory.mktemp("rules") / "rules.tsv"
    rules.write_text(RULES, encoding="utf-8")
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(LINES), model_writer=out, model_type="bpe",
                                   vocab_size=60, hard_vocab_limit=False, normalization_rule_tsv=str(rules),
                                   minloglevel=2)
    return out.getvalue()


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> bytes:
    return train_small(tmp_path_factory)


def with_map(data: bytes, blob: bytes) -> bytes:
    return spm_files.edited(spm_files.load_bytes(data), lambda p: setattr(
        p.normalizer_spec, "precompiled_charsmap", blob)).SerializeToString()


def charsmap(data: bytes) -> bytes:
    return spm_files.load_bytes(data).normalizer_spec.precompiled_charsmap


def test_small_map_encodes_as_sentencepiece(small, tmp_path):
    tok = Tokenizer.from_pretrained(spm_files.write_dir(tmp_path, small))
    sp = spm.SentencePieceProcessor(model_proto=small)
    assert len(charsmap(small)) < 2000
    for text in PROBES:
        assert tok.encode(text, add_special_tokens=False) == sp.encode(text), text


def one_byte_map(mapping: dict[int, bytes]) -> bytes:
    """A map of one-byte source strings, laid out by hand: the root's children at 256 ^ byte, each holding its value
    in unit `byte`. Bytes inside a character (a lead byte alone, a continuation byte) are allowed as sources."""
    units = [0] * 512
    units[0] = 256 << 10
    strings = b"\0"
    for byte, replacement in mapping.items():
        units[256 + byte] = byte | 0x100 | (256 << 10)
        units[byte] = VALUE_BIT | len(strings)
        strings += replacement + b"\0"
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + strings


@pytest.mark.parametrize("mapping", [{0xC3: b"x", 0x81: b"y"}, {0x81: b"y"}, {0xE2: b""}, {0xC3: b"\xc3\x81"},
                                     {ord("a"): b"bb", 0x96: b" "}], ids=str)
def test_sources_inside_a_character_behave_as_in_sentencepiece(small, mapping, tmp_path):
    """sentencepiece tries the map at every character start, and after a source that ended inside a character at
    every byte (each byte that starts no character becomes U+FFFD); a continuation byte as a source matches only
    then."""
    data = with_map(small, one_byte_map(mapping))
    tok = Tokenizer.from_pretrained(spm_files.write_dir(tmp_path, data))
    sp = spm.SentencePieceProcessor(model_proto=data)
    for text in ("Á á ▁ ☃ Ａ", "aÁa", "▁▁", "hello Á", "ﬁne \u3000x"):
        assert tok.encode(text, add_special_tokens=False) == sp.encode(text), text


def corruptions(blob: bytes) -> dict[str, bytes]:
    """name -> a corrupt map made from a valid one."""
    size = struct.unpack_from("<I", blob)[0]
    units = list(struct.unpack_from(f"<{size // 4}I", blob, 4))
    strings = blob[4 + size:]

    def rebuilt(new_units=units, new_strings=strings, header=size) -> bytes:
        return struct.pack("<I", header) + struct.pack(f"<{len(new_units)}I", *new_units) + new_strings

    node = next(i for i, u in enumerate(units) if u and not u & VALUE_BIT and u & 0x100)   # a node with a value
    value_unit = next(i for i, u in enumerate(units) if u & VALUE_BIT)
    return {
        "header only": blob[:3],
        "trie past the end": struct.pack("<I", 1 << 30) + blob[4:],
        "no string table": rebuilt(new_strings=b""),
        "trie not whole blocks": struct.pack("<I", size - 4) + blob[4:],
        "empty trie": struct.pack("<I", 0) + strings,
        "root is a value": rebuilt([units[0] | VALUE_BIT, *units[1:]]),
        "child offset past the trie": rebuilt(units[:node] + [units[node] | (0x1FFFFF << 10)] + units[node + 1:]),
        "value past the strings": rebuilt(units[:value_unit] + [VALUE_BIT | 10_000] + units[value_unit + 1:]),
        "string without its NUL": rebuilt(new_strings=strings.rstrip(b"\0")),
        "replacement not UTF-8": rebuilt(new_strings=b"\0" + b"\xff\xfe" * (len(strings) // 2)),
    }


@pytest.mark.parametrize("name", ["header only", "trie past the end", "no string table", "trie not whole blocks",
                                  "empty trie", "root is a value", "child offset past the trie",
                                  "value past the strings", "string without its NUL", "replacement not UTF-8"])
def test_corrupt_map_is_one_line_naming_the_file(small, name, tmp_path):
    blob = corruptions(charsmap(small))[name]
    d = spm_files.write_dir(tmp_path, with_map(small, blob))
    with pytest.raises(ModelDirError) as e:
        Tokenizer.from_pretrained(d)
    message = str(e.value)
    assert message.startswith(str(d / "tokenizer.model") + ": normalizer_spec.precompiled_charsmap: ")
    assert "\n" not in message and "corrupt" in message, message


def test_corrupt_map_is_a_TOK029_error(small, tmp_path):
    from llmdoctor.run.runner import run_checks
    d = spm_files.write_dir(tmp_path, with_map(small, corruptions(charsmap(small))["value past the strings"]))
    report = run_checks(d, select=["TOK029"])
    assert [(f.check, f.severity.value) for f in report.findings] == [("TOK029", "error")]
    assert "precompiled_charsmap" in report.findings[0].message


@settings(max_examples=300, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 1040), st.integers(0, 255)), min_size=1, max_size=6))
def test_random_byte_edits(small_map_model, edits):
    data, blob = small_map_model
    edited = bytearray(blob)
    for at, value in edits:
        edited[at % len(edited)] = value
    try:
        parsed = read_charsmap(bytes(edited), "tokenizer.model")
    except ModelDirError as e:
        assert str(e).startswith("tokenizer.model: ") and "\n" not in str(e)
        return
    for text in PROBES:   # a map that passed the checks walks inside its arrays and yields UTF-8 text
        raw = text.encode("utf-8").decode("latin-1")
        for pos in range(len(raw)):
            length, replacement = parsed.longest(raw, pos)
            assert 0 <= length <= len(raw) - pos
            replacement.encode("latin-1").decode("utf-8")
    for flags in (Settings(True, True, True), Settings(False, False, False)):   # and the whole normalizer
        normalizer = SpmNormalizer(flags, parsed, ["[REF]", "a b"])
        for text in PROBES + ["a b [REF] ﬁ", "\u3000a\u0301\u0301"]:
            assert isinstance(normalizer.normalize(text), str)


def test_edited_maps_that_load_encode_to_text(small, tmp_path):
    """Every single-byte edit of the map that still loads gives a tokenizer whose encode returns ids (a walk may
    stop inside a character: the bytes left become U+FFFD, as in sentencepiece)."""
    blob = charsmap(small)
    loaded = 0
    for at in range(0, len(blob), 7):
        edited = bytearray(blob)
        edited[at] ^= 0x5A
        d = spm_files.write_dir(tmp_path / str(at), with_map(small, bytes(edited)))
        try:
            tok = Tokenizer.from_pretrained(d)
        except ModelDirError as e:
            assert "\n" not in str(e)
            continue
        loaded += 1
        for text in PROBES:
            assert all(isinstance(i, int) for i in tok.encode(text))
    assert loaded > 0


@pytest.fixture(scope="module")
def small_map_model(small):
    return small, charsmap(small)
