"""Read a SentencePiece `tokenizer.model` (a protobuf ModelProto) by hand, with every length bounded.

Layout (sentencepiece_model.proto; proto2, so an absent field takes its declared default):
  ModelProto      pieces=1 (repeated SentencePiece), trainer_spec=2, normalizer_spec=3, denormalizer_spec=5
  SentencePiece   piece=1 string, score=2 float, type=3 enum (NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4,
                  UNUSED 5, BYTE 6)
  TrainerSpec     model_type=3 (UNIGRAM 1, BPE 2, WORD 3, CHAR 4), vocab_size=4, byte_fallback=35, unk/bos/eos/pad
                  id 40-43, unk_surface=44, unk/bos/eos/pad piece 45-48, treat_whitespace_as_suffix=24,
                  split_digits=25, control_symbols=30, user_defined_symbols=31, ...
  NormalizerSpec  name=1, precompiled_charsmap=2, add_dummy_prefix=3, remove_extra_whitespaces=4,
                  escape_whitespaces=5, normalization_rule_tsv=6
Wire format: each field is a varint key (number << 3 | wire type) then a varint (0), 8 bytes (1), a varint
length and that many bytes (2) or 4 bytes (5). Every length is checked against the bytes that remain before
anything is sliced, varints are at most 10 bytes, groups (3, 4) and unknown wire types are refused, and only
the three known sub-messages are descended into (unknown fields are skipped as bytes), so nesting is two
levels deep whatever the file says. Any failure is one ModelDirError naming the file.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from reference_engine.errors import ModelDirError
from reference_engine.limits import MAX_TOKENIZER_VOCAB
from reference_engine.tokenizer.models.pieces import NORMAL, PIECE_TYPES

MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}
MAX_MODEL_BYTES = 1 << 26      # 64 MiB; real tokenizer.model files are 0.5-5 MB
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
WIRE_NAMES = {0: "varint", 1: "fixed64", 2: "length-delimited", 3: "group start", 4: "group end", 5: "fixed32"}
_FLOAT = struct.Struct("<f")

# field number -> (name, kind, default); kind: int (int32), bool, str, bytes, float, strs (repeated string)
TRAINER_FIELDS = {
    3: ("model_type", "int", 1), 4: ("vocab_size", "int", 8000), 20: ("max_sentencepiece_length", "int", 16),
    21: ("split_by_unicode_script", "bool", True), 22: ("split_by_whitespace", "bool", True),
    23: ("split_by_number", "bool", True), 24: ("treat_whitespace_as_suffix", "bool", False),
    25: ("split_digits", "bool", False), 26: ("allow_whitespace_only_pieces", "bool", False),
    30: ("control_symbols", "strs", ()), 31: ("user_defined_symbols", "strs", ()),
    35: ("byte_fallback", "bool", False), 40: ("unk_id", "int", 0), 41: ("bos_id", "int", 1),
    42: ("eos_id", "int", 2), 43: ("pad_id", "int", -1), 44: ("unk_surface", "str", " \u2047 "),
    45: ("unk_piece", "str", "<unk>"), 46: ("bos_piece", "str", "<s>"), 47: ("eos_piece", "str", "</s>"),
    48: ("pad_piece", "str", "<pad>"),
}
NORMALIZER_FIELDS = {
    1: ("name", "str", ""), 2: ("precompiled_charsmap", "bytes", b""), 3: ("add_dummy_prefix", "bool", True),
    4: ("remove_extra_whitespaces", "bool", True), 5: ("escape_whitespaces", "bool", True),
    6: ("normalization_rule_tsv", "str", ""),
}
KIND_WIRE = {"int": VARINT, "bool": VARINT, "str": LENGTH, "bytes": LENGTH, "strs": LENGTH, "float": FIXED32}


@dataclass
class SentencePieceModel:
    """What a tokenizer.model holds: one entry per piece (id = position) and the two specs, defaults applied."""
    path: str
    pieces: list[str]
    scores: list[float]
    types: list[int]
    trainer: dict = field(default_factory=dict)
    normalizer: dict = field(default_factory=dict)
    has_trainer_spec: bool = False
    has_normalizer_spec: bool = False

    def __getattr__(self, name: str):   # trainer / normalizer fields as attributes: model.byte_fallback
        for table in ("trainer", "normalizer"):
            values = self.__dict__.get(table) or {}
            if name in values:
                return values[name]
        raise AttributeError(name)

    @property
    def model_type_name(self) -> str:
        return MODEL_TYPES.get(self.trainer["model_type"], str(self.trainer["model_type"]))

    def ids_of_type(self, piece_type: int) -> list[int]:
        return [i for i, t in enumerate(self.types) if t == piece_type]

    def piece_at(self, token_id: int) -> str | None:
        return self.pieces[token_id] if 0 <= token_id < len(self.pieces) else None


def read_sentencepiece_model(path: str | Path) -> SentencePieceModel:
    """Parse `path` (a SentencePiece ModelProto); ModelDirError naming the file on any malformation."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_MODEL_BYTES:
            raise ModelDirError(path, f"{size} bytes is far beyond any SentencePiece model (limit "
                                      f"{MAX_MODEL_BYTES}); not a tokenizer.model")
        data = path.read_bytes()
    except OSError as e:
        raise ModelDirError(path, f"cannot read: {e.strerror or e}") from None
    return parse_sentencepiece_model(data, str(path))


def parse_sentencepiece_model(data: bytes, path: str = "tokenizer.model") -> SentencePieceModel:
    if not data:
        raise ModelDirError(path, "empty file (not a SentencePiece model)")
    model = SentencePieceModel(path, [], [], [], _defaults(TRAINER_FIELDS), _defaults(NORMALIZER_FIELDS))
    pos, size = 0, len(data)
    while pos < size:
        pos = _plain_pieces(data, pos, size, model)   # the common layout, in one tight loop
        if pos >= size:
            break
        number, wire, value, end, pos = _field(data, pos, size, path, "ModelProto")
        if number == 1:
            _expect(wire, LENGTH, "pieces", path)
            if len(model.pieces) >= MAX_TOKENIZER_VOCAB:
                raise ModelDirError(path, f"more than {MAX_TOKENIZER_VOCAB} pieces")
            _piece(data, value, end, path, model)
        elif number in (2, 3):
            _expect(wire, LENGTH, "trainer_spec" if number == 2 else "normalizer_spec", path)
            table, target = (TRAINER_FIELDS, model.trainer) if number == 2 else (NORMALIZER_FIELDS, model.normalizer)
            _message(data, value, end, path, table, target)
            if number == 2:
                model.has_trainer_spec = True
            else:
                model.has_normalizer_spec = True
    if not model.pieces:
        raise ModelDirError(path, "no pieces: not a SentencePiece model, or the file is truncated")
    return model


def _defaults(table: dict) -> dict:
    return {name: (list(default) if kind == "strs" else default) for name, kind, default in table.values()}


def _plain_pieces(data: bytes, pos: int, end: int, model: SentencePieceModel) -> int:
    """Read consecutive pieces laid out as sentencepiece writes them (0A n 0A k <text> 15 <f32> [18 <type>],
    one-byte lengths); returns where the first piece of any other shape starts (the general reader takes it).
    A 32k-piece model is ~25 bytecode operations per piece instead of a generator per field."""
    pieces, scores, types, unpack = model.pieces, model.scores, model.types, _FLOAT.unpack_from
    room = MAX_TOKENIZER_VOCAB - len(pieces)
    while pos + 3 < end and data[pos] == 0x0A and data[pos + 1] < 0x80 and data[pos + 2] == 0x0A and room > 0:
        stop = pos + 2 + data[pos + 1]
        text_end = pos + 4 + data[pos + 3]
        if data[pos + 3] >= 0x80 or stop > end or text_end + 5 > stop or data[text_end] != 0x15:
            break
        if stop == text_end + 5:
            kind = NORMAL
        elif stop == text_end + 7 and data[text_end + 5] == 0x18 and 1 <= data[text_end + 6] <= 6:
            kind = data[text_end + 6]
        else:
            break
        try:
            piece = data[pos + 4:text_end].decode("utf-8")
        except UnicodeDecodeError:
            break
        pieces.append(piece)
        scores.append(unpack(data, text_end + 1)[0])
        types.append(kind)
        room -= 1
        pos = stop
    return pos


def _piece(data: bytes, pos: int, end: int, path: str, model: SentencePieceModel) -> None:
    piece, score, kind = "", 0.0, NORMAL
    index = len(model.pieces)
    while pos < end:
        number, wire, value, stop, pos = _field(data, pos, end, path, f"piece {index}")
        if number == 1:
            _expect(wire, LENGTH, f"piece {index} text", path)
            piece = _text(data, value, stop, path, f"piece {index}")
        elif number == 2:
            _expect(wire, FIXED32, f"piece {index} score", path)
            score = value
        elif number == 3:
            _expect(wire, VARINT, f"piece {index} type", path)
            kind = _piece_type(value, index, path)
    model.pieces.append(piece)
    model.scores.append(score)
    model.types.append(kind)


def _piece_type(value: int, index: int, path: str) -> int:
    if value not in PIECE_TYPES:
        raise ModelDirError(path, f"piece {index} has type {value}, not one of 1-6 (NORMAL..BYTE)")
    return value


def _message(data: bytes, start: int, end: int, path: str, table: dict, target: dict) -> None:
    pos = start
    while pos < end:
        number, wire, value, stop, pos = _field(data, pos, end, path, "spec")
        known = table.get(number)
        if known is None:
            continue
        name, kind, _ = known
        _expect(wire, KIND_WIRE[kind], name, path)
        if kind == "int":
            target[name] = _int32(value)
        elif kind == "bool":
            target[name] = value != 0
        elif kind == "float":
            target[name] = value
        elif kind == "bytes":
            target[name] = bytes(data[value:stop])
        elif kind == "str":
            target[name] = _text(data, value, stop, path, name)
        else:
            target[name].append(_text(data, value, stop, path, name))


def _field(data: bytes, pos: int, end: int, path: str, where: str):
    """The field at data[pos:end] as (number, wire type, value, stop, next position); value is the int for
    varint/fixed64, the float for fixed32, the payload's start for length-delimited ones (payload = [value, stop))."""
    key, pos = _varint(data, pos, end, path, where)
    number, wire = key >> 3, key & 7
    if number == 0:
        raise ModelDirError(path, f"field number 0 in {where} at byte {pos}: corrupt protobuf")
    if wire == VARINT:
        value, pos = _varint(data, pos, end, path, where)
        return number, wire, value, pos, pos
    if wire == LENGTH:
        length, pos = _varint(data, pos, end, path, where)
        if length > end - pos:
            raise ModelDirError(path, f"field {number} of {where} declares {length} bytes but only "
                                      f"{end - pos} remain: truncated or corrupt")
        return number, wire, pos, pos + length, pos + length
    size = {FIXED32: 4, FIXED64: 8}.get(wire)
    if size is None:
        raise ModelDirError(path, f"field {number} of {where} has wire type {wire} "
                                  f"({WIRE_NAMES.get(wire, 'invalid')}): corrupt or not a SentencePiece model")
    if end - pos < size:
        raise ModelDirError(path, f"field {number} of {where} is cut off (truncated file)")
    value = _FLOAT.unpack_from(data, pos)[0] if wire == FIXED32 else int.from_bytes(data[pos:pos + 8], "little")
    return number, wire, value, pos + size, pos + size


def _varint(data: bytes, pos: int, end: int, path: str, where: str) -> tuple[int, int]:
    if pos < end and data[pos] < 0x80:
        return data[pos], pos + 1
    result = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ModelDirError(path, f"a varint in {where} runs past 10 bytes: corrupt protobuf")
    raise ModelDirError(path, f"{where} ends inside a varint (truncated file)")


def _expect(wire: int, expected: int, name: str, path: str) -> None:
    if wire != expected:
        raise ModelDirError(path, f"{name} has wire type {wire} ({WIRE_NAMES.get(wire, 'invalid')}), expected "
                                  f"{WIRE_NAMES[expected]}: corrupt or not a SentencePiece model")


def _text(data: bytes, start: int, end: int, path: str, name: str) -> str:
    try:
        return data[start:end].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelDirError(path, f"{name} is not UTF-8 ({e.reason} at byte {start + e.start})") from None


def _int32(value: int) -> int:
    """A varint as int32: negative numbers are written as 64-bit two's complement (10 bytes)."""
    value &= (1 << 64) - 1
    if value >= 1 << 63:
        value -= 1 << 64
    if not -(1 << 31) <= value < 1 << 31:
        value = ((value + (1 << 31)) % (1 << 32)) - (1 << 31)   # protobuf truncates to 32 bits
    return value

