"""A Tokenizer from a SentencePiece BPE `tokenizer.model` (+ tokenizer_config.json), for directories without
tokenizer.json: id for id what `sentencepiece` encodes, with transformers' rules only where sentencepiece has none.

- Text is normalized as sentencepiece does (spm_normalizer.py: the precompiled character map, extra-whitespace
  removal, "▁" for spaces, one dummy prefix), USER_DEFINED pieces are matched in the normalized text as frozen
  symbols (a piece containing "▁" matches too), and the stretches between them are merged by piece score
  (spm.SpmModel in SentencePiece mode).
- CONTROL and UNKNOWN pieces written in the text are matched in the raw text as special added tokens, as
  transformers does (sentencepiece never produces them from text; chat templates write them). With `legacy`
  (tokenizer_config.json; absent means true, as in transformers 4) every stretch between them gets the dummy
  prefix, with legacy=false only the start of the text (transformers#25073). add_prefix_space in
  tokenizer_config.json overrides add_dummy_prefix.
- BOS/EOS follow add_bos_token (default true) / add_eos_token (default false), LlamaTokenizer's defaults; the
  token strings come from tokenizer_config.json, else from the trainer spec's ids.
- decode is sentencepiece's (SentencePieceDecoder): "▁" -> " ", byte pieces as UTF-8 (one U+FFFD per invalid
  byte), the UNKNOWN piece as the trainer's unk_surface (" ⁇ " by default, also when special tokens are skipped:
  sentencepiece has nothing to skip it with), the leading "▁" of the first pieces dropped as sentencepiece does.
  CONTROL pieces are dropped when skip_special_tokens is set and written otherwise, as transformers does.
`tok.sentencepiece_spec` is the tokenizer.json transformers' LlamaConverter would write for the same files (the
checks read it as the token table); the encoding itself is the one described above.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.tokenizer.models.pieces import (BYTE, CONTROL, MERGEABLE_TYPES, SPACE, UNKNOWN, UNUSED,
                                                      USER_DEFINED, byte_value)
from reference_engine.tokenizer.models.spm import SpmModel
from reference_engine.tokenizer.pipeline.added_tokens import AddedToken
from reference_engine.tokenizer.pipeline.pre_tokenizers import Piece
from reference_engine.tokenizer.sources.precompiled_charsmap import read_charsmap
from reference_engine.tokenizer.sources.sentencepiece_model import SentencePieceModel, read_sentencepiece_model
from reference_engine.tokenizer.sources.spm_normalizer import Settings, SpmNormalizer

# `cls` is the Tokenizer class, passed in by Tokenizer.from_pretrained so that this module does not import it
BPE_TYPE = 2
ADDED_TYPES = (UNKNOWN, CONTROL, USER_DEFINED)   # the added tokens of a converted tokenizer.json
RAW_MATCHED = (UNKNOWN, CONTROL)                 # what this tokenizer matches in raw text (transformers' rule)
SPECIAL_IDS = (("bos_token", "bos_id"), ("eos_token", "eos_id"), ("unk_token", "unk_id"), ("pad_token", "pad_id"))


def tokenizer_from_model_file(directory: Path, config: dict, chat_template: str | None, cls):
    """A directory without tokenizer.json: its tokenizer.model, if it is a SentencePiece one."""
    from reference_engine.tokenizer.sources.tiktoken_file import looks_like_tiktoken

    path = directory / "tokenizer.model"
    if not path.is_file():
        raise ModelDirError(directory / "tokenizer.json", "file not found, and no tokenizer.model either "
                                                          "(tokenizer.json or a SentencePiece tokenizer.model needed)")
    if looks_like_tiktoken(path):
        raise UnsupportedError(path, "a tiktoken-format file (base64 token + rank per line, as in Llama 3's "
                                     "original release): it has no pre-tokenizer regex; export a tokenizer.json")
    return tokenizer_from_sentencepiece(path, cls, config, chat_template)


def tokenizer_from_sentencepiece(path: str | Path, cls, config: dict | None = None,
                                 chat_template: str | None = None):
    """The Tokenizer of tokenizer.model at `path`; ModelDirError / UnsupportedError naming the file."""
    model = read_sentencepiece_model(path)
    check_runnable(model)
    return tokenizer_from_model(model, cls, config, chat_template)


def tokenizer_from_model(model: SentencePieceModel, cls, config: dict | None = None,
                         chat_template: str | None = None):
    """The Tokenizer (`cls`) of a parsed, check_runnable model under tokenizer_config.json settings `config`."""
    config = dict(config or {})
    spec = tokenizer_spec(model, config)
    runtime = {**spec, "normalizer": None, "pre_tokenizer": None,
               "added_tokens": [t for t in spec["added_tokens"] if model.types[t["id"]] in RAW_MATCHED]}
    tok = cls(runtime, special_config(model, config), model.path, chat_template)
    unk = model.ids_of_type(UNKNOWN)
    user_defined = model.ids_of_type(USER_DEFINED)
    tok.model = SpmModel(vocab=tok.model.vocab, scores=list(model.scores), unk_id=unk[0] if unk else None,
                         byte_fallback=bool(model.byte_fallback),
                         mergeable={p: i for i, p in enumerate(model.pieces) if model.types[i] in MERGEABLE_TYPES},
                         unused=frozenset(model.ids_of_type(UNUSED)),
                         frozen={model.pieces[i]: i for i in user_defined})
    tok.pre_tokenizer = SentencePieceWords(normalizer_of(model), config.get("legacy") is not False,
                                           _dummy_prefix(model, config))
    for i in user_defined:   # listed as added tokens, as a converted tokenizer.json lists them (checks read the
        # list), but matched by SentencePieceWords in the normalized text, not by the raw matcher built above
        token = AddedToken(i, model.pieces[i], special=False, normalized=True)
        tok.added_tokens.append(token)
        tok.added_by_id[i] = tok.added_by_content[token.content] = token
    tok.decoder = SentencePieceDecoder(model, _dummy_prefix(model, config))
    tok.special_contents = tok.special_contents - {model.pieces[i] for i in unk}
    tok.sentencepiece = model
    tok.sentencepiece_spec = spec
    return tok


class SentencePieceDecoder:
    """sentencepiece's SentencePieceProcessor::Decode on the token strings Tokenizer.decode hands its decoder
    (pieces are unique, so a string names its piece and type). While the text is still empty, a piece's leading
    "▁" is the dummy prefix and dropped (once; with remove_extra_whitespaces every leading one)."""

    def __init__(self, model: SentencePieceModel, dummy_prefix: bool):
        self.types = dict(zip(model.pieces, model.types))
        self.unk_surface = model.unk_surface
        self.strip_first = dummy_prefix or bool(model.remove_extra_whitespaces)
        self.strip_all = bool(model.remove_extra_whitespaces)

    def __call__(self, tokens: list[str]) -> list[str]:
        out: list[str] = []
        pending = bytearray()
        bos_ws, seen = True, False           # still at the start; the last piece gave up its leading "▁"
        for token in tokens:
            kind = self.types.get(token)
            if kind == BYTE:
                pending.append(byte_value(token))
                continue
            if pending:
                out.append(utf8_per_character(pending))
                pending.clear()
            if seen or (out and out[-1]):
                bos_ws = False
            seen = False
            if kind == UNKNOWN:
                out.append(self.unk_surface)
            elif bos_ws and self.strip_first and kind != CONTROL and token.startswith(SPACE):
                out.append(token[1:].replace(SPACE, " "))
                seen = not self.strip_all
            else:
                out.append(token.replace(SPACE, " "))
        if pending:
            out.append(utf8_per_character(pending))
        return ["".join(out)]


def utf8_per_character(data: bytes) -> str:
    """Bytes as UTF-8, one character at a time; a byte that starts no valid character is one U+FFFD."""
    out, i = [], 0
    while i < len(data):
        for n in (1, 2, 3, 4):
            try:
                out.append(data[i:i + n].decode("utf-8"))
                i += n
                break
            except UnicodeDecodeError:
                continue
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


def normalizer_of(model: SentencePieceModel) -> SpmNormalizer:
    """sentencepiece's normalizer for this model (its precompiled map read and checked here)."""
    blob = model.precompiled_charsmap
    settings = Settings(bool(model.add_dummy_prefix), bool(model.remove_extra_whitespaces),
                        bool(model.escape_whitespaces))
    return SpmNormalizer(settings, _charsmap(blob, model.path) if blob else None,
                         [model.pieces[i] for i in model.ids_of_type(USER_DEFINED)])


# check_runnable reads the map, and so does the tokenizer built next (checks build several from one model)
_charsmap = lru_cache(maxsize=8)(read_charsmap)


class SentencePieceWords:
    """The pre-tokenizer slot of a tokenizer.model Tokenizer: each stretch of raw text between CONTROL pieces is
    normalized (dummy prefix at the start of the text, and after a CONTROL piece with legacy) and cut into
    USER_DEFINED pieces and the stretches the model merges."""

    def __init__(self, normalizer: SpmNormalizer, legacy: bool, dummy_prefix: bool):
        self.normalizer, self.legacy, self.dummy_prefix = normalizer, legacy, dummy_prefix

    def rewrite(self, text: str) -> str:
        """What normalization alone makes of `text` (spaces as spaces, no dummy prefix), so that checks can tell
        the normalizer's folding (NFKC, whitespace removal) from a lossy decoder."""
        return self.normalizer.normalize(text, False).replace(SPACE, " ")

    def __call__(self, pieces: list[Piece]) -> list[Piece]:
        out = []
        for piece in pieces:
            prefix = self.dummy_prefix and (self.legacy or piece.at_origin)
            normalized = self.normalizer.normalize(piece.text, prefix)
            out += [Piece(part, False) for part in self.normalizer.split(normalized)]
        return out


def check_runnable(model: SentencePieceModel) -> None:
    """Refuse what sentencepiece itself refuses (duplicates, bad byte pieces) and what is not reproduced here."""
    path = model.path
    if not model.has_trainer_spec:
        raise ModelDirError(path, "no trainer_spec (truncated file, or not a SentencePiece model)")
    if model.trainer["model_type"] != BPE_TYPE:
        raise UnsupportedError(path, f"a {model.model_type_name} SentencePiece model; only BPE tokenizer.model "
                                     "files are run here (export a tokenizer.json with transformers)")
    if model.precompiled_charsmap:
        _charsmap(model.precompiled_charsmap, path)   # every offset checked: a corrupt map is one line
    if model.treat_whitespace_as_suffix:
        raise UnsupportedError(path, "treat_whitespace_as_suffix is not supported")
    seen: dict[str, int] = {}
    for i, (piece, kind) in enumerate(zip(model.pieces, model.types)):
        if not piece:
            raise ModelDirError(path, f"piece {i} is empty")
        if piece in seen:
            raise ModelDirError(path, f"piece {piece!r} is defined twice (ids {seen[piece]} and {i})")
        seen[piece] = i
        if kind == BYTE and (not model.byte_fallback or byte_value(piece) is None):
            raise ModelDirError(path, f"byte piece {piece!r} (id {i}) "
                                      + ("but byte_fallback is false" if model.byte_fallback is False else
                                         "is not of the form <0xNN>"))
    if model.byte_fallback:
        missing = sorted(set(range(256)) - {byte_value(model.pieces[i]) for i in model.ids_of_type(BYTE)})
        if missing:
            raise ModelDirError(path, f"byte_fallback is on but {len(missing)} byte piece(s) are missing, e.g. "
                                      f"<0x{missing[0]:02X}>")
    unknown = model.ids_of_type(UNKNOWN)
    if len(unknown) != 1:
        raise ModelDirError(path, f"{len(unknown)} UNKNOWN pieces; a SentencePiece model has exactly one")


def tokenizer_spec(model: SentencePieceModel, config: dict) -> dict:
    """The tokenizer.json LlamaConverter would write for this model and tokenizer_config (flags: legacy,
    add_prefix_space). Its model section lists the vocabulary; the encoding itself is SpmModel's."""
    legacy = config.get("legacy") is not False
    prefix = _dummy_prefix(model, config)
    normalizers = []
    if model.remove_extra_whitespaces:   # SentencePiece trims and collapses ASCII spaces only
        normalizers += [{"type": "Replace", "pattern": {"Regex": r"\A +| +\Z"}, "content": ""},
                        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
    pre_tokenizer = None
    if legacy:
        if prefix:
            normalizers.append({"type": "Prepend", "prepend": SPACE})
        if model.escape_whitespaces:
            normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": SPACE})
    else:
        pre_tokenizer = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first" if prefix else "never",
                         "split": False}
    decoders = [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "}]
    if model.byte_fallback:
        decoders.append({"type": "ByteFallback"})
    decoders.append({"type": "Fuse"})
    if prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    unk = model.ids_of_type(UNKNOWN)
    return {
        "model": {"type": "BPE", "vocab": {p: i for i, p in enumerate(model.pieces)}, "merges": [],
                  "byte_fallback": bool(model.byte_fallback),
                  "unk_token": model.pieces[unk[0]] if unk else None},
        "normalizer": {"type": "Sequence", "normalizers": normalizers} if normalizers else None,
        "pre_tokenizer": pre_tokenizer,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "added_tokens": [{"id": i, "content": p, "special": t != USER_DEFINED, "normalized": False,
                          "lstrip": False, "rstrip": False, "single_word": False}
                         for i, (p, t) in enumerate(zip(model.pieces, model.types)) if t in ADDED_TYPES],
    }


def _dummy_prefix(model: SentencePieceModel, config: dict) -> bool:
    prefix = config.get("add_prefix_space")
    return bool(model.add_dummy_prefix) if not isinstance(prefix, bool) else prefix


def special_config(model: SentencePieceModel, config: dict) -> dict:
    """tokenizer_config.json with the special tokens it leaves out taken from the trainer spec's ids and
    LlamaTokenizer's add_bos_token=True / add_eos_token=False defaults."""
    config = dict(config)
    for name, id_field in SPECIAL_IDS:
        piece = model.piece_at(model.trainer[id_field])
        if config.get(name) is None and piece is not None:
            config[name] = piece
    config.setdefault("add_bos_token", True)
    config.setdefault("add_eos_token", False)
    return config
