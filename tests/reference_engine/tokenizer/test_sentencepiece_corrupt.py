"""Corrupt tokenizer.model files: a table of hand-made malformations and random truncations / byte edits, each
either loads or fails with one ModelDirError line naming tokenizer.model; never another exception, a hang or an
allocation sized by a declared length."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st
from sentencepiece import sentencepiece_model_pb2 as pb

from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.sources.sentencepiece_model import parse_sentencepiece_model
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests import spm_files


def small_model() -> bytes:
    """A runnable BPE model: <unk> <s> </s>, 256 byte pieces, a few merges, trainer and normalizer specs."""
    proto = pb.ModelProto()
    proto.pieces.add(piece="<unk>", score=0, type=2)
    proto.pieces.add(piece="<s>", score=0, type=3)
    proto.pieces.add(piece="</s>", score=0, type=3)
    for b in range(256):
        proto.pieces.add(piece=f"<0x{b:02X}>", score=0, type=6)
    for i, piece in enumerate(["▁", "h", "i", "▁h", "hi", "▁hi", "e", "l", "o", "ll", "▁he", "▁hell", "▁hello"]):
        proto.pieces.add(piece=piece, score=-float(i))
    proto.trainer_spec.model_type, proto.trainer_spec.byte_fallback = 2, True
    proto.normalizer_spec.name, proto.normalizer_spec.add_dummy_prefix = "identity", True
    proto.normalizer_spec.remove_extra_whitespaces = False
    return proto.SerializeToString()


SMALL = small_model()


def key(number: int, wire: int) -> bytes:
    return bytes([number << 3 | wire])


CORRUPTIONS = {
    "empty": b"",
    "text file": b"hello world, not a model\n",
    "absurd length": key(1, 2) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10,
    "length past the end": key(1, 2) + bytes([100]) + b"\x0a\x01a",
    "endless varint": key(1, 0) + b"\xff" * 20,
    "varint cut off": key(1, 0) + b"\xff\xff",
    "group wire type": key(1, 3) + SMALL,
    "invalid wire type 7": bytes([1 << 3 | 7]) + SMALL,
    "field number 0": b"\x02\x00" + SMALL,
    "pieces as varint": key(1, 0) + b"\x05" + SMALL,
    "piece type 9": key(1, 2) + b"\x07\x0a\x01a\x18\x09" + SMALL[:0],
    "piece not UTF-8": key(1, 2) + b"\x03\x0a\x01\xff",
    "score cut off": key(1, 2) + b"\x03\x15\x00\x00",
    "fixed64 cut off": key(9, 1) + b"\x00\x00",
    "no trainer spec": key(1, 2) + b"\x05\x0a\x03abc",
    "truncated by one byte": SMALL[:-1],
    "trainer_spec of the wrong type": SMALL + key(2, 5) + b"\x00\x00\x00\x00",
    "duplicate piece": SMALL + key(1, 2) + b"\x05\x0a\x03\xe2\x96\x81",
    "byte piece without byte_fallback": SMALL + key(2, 2) + b"\x03\x98\x02\x00",   # byte_fallback=35 -> false
    "byte piece not <0xNN>": SMALL + key(1, 2) + b"\x0a\x0a\x06<0xZZ>\x18\x06",
    "empty piece": SMALL + key(1, 2) + b"\x02\x0a\x00",
    "two unknown pieces": SMALL + key(1, 2) + b"\x0b\x0a\x07<unk2>x\x18\x02",
}


def assert_clean(data: bytes, tmp_path) -> None:
    """Parsing and building a tokenizer either work or fail in one line that names tokenizer.model."""
    d = spm_files.write_dir(tmp_path, data)
    try:
        tok = Tokenizer.from_pretrained(d)
    except ModelDirError as e:
        assert "tokenizer.model" in str(e) and "\n" not in str(e), str(e)
        return
    tok.decode(tok.encode("hello there 😀"))


def test_the_small_model_is_runnable(tmp_path):
    import sentencepiece as spm

    tok, sp = Tokenizer.from_pretrained(spm_files.write_dir(tmp_path, SMALL)), spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(SMALL)
    for text in ("hello hi", "hi  hello 😀", "ohell"):
        assert tok.encode(text, add_special_tokens=False) == sp.encode(text), text


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corruption_is_one_line_naming_the_file(name, tmp_path):
    d = spm_files.write_dir(tmp_path, CORRUPTIONS[name])
    with pytest.raises(ModelDirError) as e:
        Tokenizer.from_pretrained(d)
    assert str(e.value).startswith(str(d / "tokenizer.model") + ": ") and "\n" not in str(e.value), str(e.value)


def test_huge_file_is_refused_before_reading(tmp_path):
    d = spm_files.write_dir(tmp_path, b"")
    with open(d / "tokenizer.model", "wb") as f:
        f.truncate(1 << 27)   # sparse: no disk, no memory
    with pytest.raises(ModelDirError, match="far beyond any SentencePiece model"):
        Tokenizer.from_pretrained(d)


@settings(max_examples=150)
@given(cut=st.integers(0, len(SMALL)), edits=st.lists(st.tuples(st.integers(0, len(SMALL) - 1),
                                                                 st.integers(0, 255)), max_size=4))
def test_random_truncation_and_byte_edits(cut, edits, tmp_path_factory):
    data = bytearray(SMALL)
    for at, value in edits:
        data[at] = value
    assert_clean(bytes(data[:cut]), tmp_path_factory.mktemp("fuzz"))


@settings(max_examples=60)
@given(st.binary(max_size=300))
def test_random_bytes(data):
    try:
        parse_sentencepiece_model(data)
    except ModelDirError as e:
        assert str(e).startswith("tokenizer.model: ")


@pytest.mark.assets
def test_real_model_truncated_anywhere(tmp_path):
    data = spm_files.mistral_proto().SerializeToString()
    for cut in (1, 2, 100, 4097, len(data) // 2, len(data) - 300, len(data) - 2):
        assert_clean(data[:cut], tmp_path / str(cut))


def test_negative_ids_read_as_int32():
    proto = pb.ModelProto()
    proto.ParseFromString(SMALL)
    proto.trainer_spec.pad_id, proto.trainer_spec.bos_id = -1, -7
    model = parse_sentencepiece_model(proto.SerializeToString())
    assert (model.pad_id, model.bos_id, model.eos_id, model.unk_id) == (-1, -7, 2, 0)
    assert model.scores[-1] == struct.unpack("<f", struct.pack("<f", -12.0))[0]
