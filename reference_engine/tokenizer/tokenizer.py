"""Stage 1 of the engine: text <-> token ids, reproducing Hugging Face `tokenizers` id for id.

Pipeline for `encode` (the order tokenizers uses):
  raw text -> split out added tokens with normalized=false -> normalize the rest -> split out added
  tokens with normalized=true -> pre-tokenize into words -> BPE each word -> post-process (BOS/EOS).
`decode` maps ids back to token strings (dropping special ones if asked) and runs the decoder chain.
"""
from __future__ import annotations

import json
from pathlib import Path

from reference_engine.tokenizer.pipeline.added_tokens import AddedToken, AddedTokenMatcher, parse_added_tokens
from reference_engine.tokenizer.models.bpe import BPE, build_bpe
from reference_engine.config import load_tokenizer_config, model_dir_path, read_json
from reference_engine.limits import check_token_ids
from reference_engine.tokenizer.pipeline.decoders import build_decoder
from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.pipeline.normalizers import build_normalizer
from reference_engine.tokenizer.pipeline.post_processors import build_post_processor, template
from reference_engine.tokenizer.pipeline.byte_level_plan import byte_level_plan
from reference_engine.tokenizer.pipeline.pre_tokenizers import Piece, build_pre_tokenizer, to_byte_level

NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class InvalidTextError(ValueError):
    """The input is not valid Unicode text (it holds lone surrogates), so it has no UTF-8 bytes."""


class Tokenizer:
    """A BPE tokenizer built from tokenizer.json (+ tokenizer_config.json, special_tokens_map.json)."""

    def __init__(self, spec: dict, config: dict | None = None, path: str = "tokenizer.json",
                 chat_template: str | None = None):
        self.path = path
        self.config = dict(config or {})
        self.model: BPE = build_bpe(_require(spec, "model", path), path)
        self.normalizer = build_normalizer(spec.get("normalizer"), path)
        self.pre_tokenizer = build_pre_tokenizer(spec.get("pre_tokenizer"), path)
        self.byte_level_plan = byte_level_plan(spec.get("pre_tokenizer"))
        self.word_cache: dict[str, list[int]] = {}  # raw word -> ids, for the byte-level fast path
        self.decoder = build_decoder(spec.get("decoder"), path)
        # Byte-level tokenizers without a normalizer are lossless: decode(encode(s)) == s for every s.
        self.lossless = _uses(spec.get("decoder"), "ByteLevel") and spec.get("normalizer") is None
        self.added_tokens: list[AddedToken] = parse_added_tokens(spec.get("added_tokens"), path)
        self.raw_matcher = AddedTokenMatcher([t for t in self.added_tokens if not t.normalized])
        self.normalized_matcher = AddedTokenMatcher([t for t in self.added_tokens if t.normalized], self.normalizer)
        self.added_by_id = {t.id: t for t in self.added_tokens}
        self.added_by_content = {t.content: t for t in self.added_tokens}
        check_token_ids((self.model.id_to_token, self.added_by_id), path)   # before any table is sized by an id
        # What decode() feeds the decoder for an added token: tokenizers >= 0.21 uses the normalized
        # form for normalized tokens (so the decoder can undo the normalizer) and skips a token as
        # special only when that string is a special token's content, quirks included.
        self.added_decode_strings = {t.id: self.normalizer(t.content) if t.normalized and self.normalizer else t.content
                                     for t in self.added_tokens}
        self.special_contents = {t.content for t in self.added_tokens if t.special}
        self.post_processor = build_post_processor(spec.get("post_processor"), path) \
            or self._template_from_config()
        self.chat_template = chat_template if chat_template is not None else _config_chat_template(self.config)
        self.padding_side = self.config.get("padding_side", "left")
        if self.padding_side not in ("left", "right"):
            self.padding_side = "left"
        # tokenizer.json may carry a truncation preset: __call__(truncation=True) uses its max_length.
        self.truncation_preset = spec.get("truncation")

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, model_dir: str | Path) -> "Tokenizer":
        """Load the tokenizer of a model directory or GGUF file; bad or unsupported files raise ModelDirError."""
        from reference_engine.files.gguf_file import GGUFFile, find_gguf
        gguf = find_gguf(model_dir) if Path(model_dir).exists() else None
        if gguf is not None:  # a .gguf file, or a directory holding one: tokenizer.ggml.* metadata
            return cls.from_gguf(GGUFFile.open(gguf))
        directory = model_dir_path(model_dir)
        spec_path = directory / "tokenizer.json"
        config = load_tokenizer_config(directory)
        special_map = directory / "special_tokens_map.json"
        if special_map.is_file():
            for key, value in read_json(special_map).items():
                config.setdefault(key, value)
        template_file = directory / "chat_template.jinja"
        chat_template = template_file.read_text(encoding="utf-8") if template_file.is_file() else None
        if not spec_path.is_file():   # a SentencePiece tokenizer.model alone (Llama 2 / Mistral originals)
            from reference_engine.tokenizer.sources.spm_tokenizer import tokenizer_from_model_file
            return tokenizer_from_model_file(directory, config, chat_template, cls)
        return cls(read_json(spec_path), config, str(spec_path), chat_template)

    @classmethod
    def from_gguf(cls, gguf) -> "Tokenizer":
        """From an opened GGUFFile's tokenizer.ggml.* metadata, the way llama.cpp reads it (gguf_tokenizer.py)."""
        from reference_engine.tokenizer.sources.gguf_tokenizer import tokenizer_from_gguf
        return tokenizer_from_gguf(gguf, cls)

    @classmethod
    def from_json(cls, spec: dict | str, config: dict | None = None) -> "Tokenizer":
        """Build from tokenizer.json content (a dict or its JSON text), e.g. the output of train_bpe."""
        if isinstance(spec, str):
            spec = json.loads(spec)
        return cls(spec, config)

    def _template_from_config(self):
        """No post_processor in tokenizer.json: BOS/EOS follow tokenizer_config's add_bos_token /
        add_eos_token, as transformers' update_post_processor does."""
        def special(flag: str, token: str | None) -> list[dict]:
            if not self.config.get(flag) or token is None or self.token_to_id(token) is None:
                return []
            specials[token] = {"ids": [self.token_to_id(token)]}
            return [{"SpecialToken": {"id": token}}]

        specials: dict[str, dict] = {}
        single = [*special("add_bos_token", self.bos_token), {"Sequence": {"id": "A"}},
                  *special("add_eos_token", self.eos_token)]
        return template({"single": single, "special_tokens": specials}, self.path)

    # -- vocabulary ------------------------------------------------------------------------------

    def token_to_id(self, token: str) -> int | None:
        added = self.added_by_content.get(token)
        return added.id if added is not None else self.model.vocab.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        added = self.added_by_id.get(token_id)
        return added.content if added is not None else self.model.id_to_token.get(token_id)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self.id_to_token(ids)
        return [self.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self.token_to_id(tokens)
        return [self.token_to_id(t) for t in tokens]

    def get_vocab(self) -> dict[str, int]:
        vocab = dict(self.model.vocab)
        vocab.update({t.content: t.id for t in self.added_tokens})
        return vocab

    @property
    def vocab_size(self) -> int:
        """Base vocabulary size (the BPE model's vocab, without added tokens)."""
        return len(self.model.vocab)

    def __len__(self) -> int:
        """Vocabulary including added tokens (distinct tokens, as tokenizers counts them)."""
        return len(self.model.vocab) + sum(1 for t in self.added_tokens if t.content not in self.model.vocab)

    @property
    def max_token_id(self) -> int:
        """The largest id the tokenizer can produce; the embedding needs at least this + 1 rows."""
        return max([*self.model.id_to_token, *self.added_by_id, -1])

    def special_token(self, name: str) -> str | None:
        value = self.config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        return value if isinstance(value, str) else None

    bos_token = property(lambda self: self.special_token("bos_token"))
    eos_token = property(lambda self: self.special_token("eos_token"))
    pad_token = property(lambda self: self.special_token("pad_token"))
    unk_token = property(lambda self: self.special_token("unk_token"))
    bos_token_id = property(lambda self: self._special_id("bos_token"))
    eos_token_id = property(lambda self: self._special_id("eos_token"))
    pad_token_id = property(lambda self: self._special_id("pad_token"))
    unk_token_id = property(lambda self: self._special_id("unk_token"))

    def _special_id(self, name: str) -> int | None:
        token = self.special_token(name)
        return None if token is None else self.token_to_id(token)

    @property
    def all_special_tokens(self) -> list[str]:
        """Named special tokens then extra ones, as transformers lists them."""
        names = [self.special_token(n) for n in NAMED_SPECIAL_TOKENS]
        extra = self.config.get("additional_special_tokens") or self.config.get("extra_special_tokens") or []
        extra = [e.get("content") if isinstance(e, dict) else e for e in extra] if isinstance(extra, list) else []
        return list(dict.fromkeys(t for t in [*names, *extra] if isinstance(t, str)))

    @property
    def all_special_ids(self) -> list[int]:
        return [i for i in (self.token_to_id(t) for t in self.all_special_tokens) if i is not None]

    @property
    def add_bos_token(self) -> bool:
        """Whether encode(add_special_tokens=True) starts with BOS (what the post-processor does)."""
        ids = self.post_process([])
        return self.bos_token_id is not None and ids[:1] == [self.bos_token_id]

    @property
    def add_eos_token(self) -> bool:
        ids = self.post_process([])
        return self.eos_token_id is not None and ids[-1:] == [self.eos_token_id]

    # -- encoding / decoding -------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text` (with the post-processor's BOS/EOS when add_special_tokens)."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, not {type(text).__name__}")
        ids: list[int] = []
        try:
            for segment, token, at_origin in self._segments(text):
                if token is not None:
                    ids.append(token.id)
                else:
                    self._encode_segment(segment, at_origin, ids)
        except UnicodeEncodeError as e:  # a lone surrogate (e.g. "\ud800" from JSON) is not text
            raise InvalidTextError(f"text has no UTF-8 form: {e.object[e.start:e.end]!r} is a lone surrogate; "
                                   "only valid Unicode can be tokenized") from None
        return self.post_process(ids) if add_special_tokens else ids

    def post_process(self, ids: list[int]) -> list[int]:
        return self.post_processor(ids) if self.post_processor is not None else ids

    def _segments(self, text: str):
        """(text, None, at_origin) stretches to encode and ("", AddedToken, _) matches, in order."""
        offset = 0
        for raw, token in self.raw_matcher.split(text):
            at_origin = offset == 0
            offset += len(raw)
            if token is not None:
                yield raw, token, at_origin
                continue
            normalized = self.normalizer(raw) if self.normalizer is not None else raw
            first = True
            for piece, added in self.normalized_matcher.split(normalized):
                yield piece, added, at_origin and first
                first = False

    def _encode_segment(self, text: str, at_origin: bool, ids: list[int]) -> None:
        if not text:
            return
        if self.byte_level_plan is not None and self._encode_byte_level(text, ids):
            return
        encode_word = self.model.encode_word
        if self.pre_tokenizer is None:
            ids.extend(encode_word(text))
            return
        for piece in self.pre_tokenizer([Piece(text, at_origin)]):
            ids.extend(encode_word(piece.text))

    def _encode_byte_level(self, text: str, ids: list[int]) -> bool:
        """Fast path: regex words -> cached ids. False (nothing appended) when a regex matched the empty
        string, in which case the general pipeline handles the text."""
        plan = self.byte_level_plan
        if plan.add_prefix_space and text[0] != " ":
            text = " " + text
        words = plan.words(text)
        if words is None:
            return False
        cache, encode_word = self.word_cache, self.model.encode_word
        for word in words:
            word_ids = cache.get(word)
            if word_ids is None:
                word_ids = encode_word(to_byte_level(word))
                if len(word) < 256:
                    if len(cache) >= 100_000:
                        cache.clear()  # bounded memory on adversarial input
                    cache[word] = word_ids
            ids += word_ids
        return True

    def clear_caches(self) -> None:
        """Forget every word seen (the next encode is cold): the word caches and the pre-tokenizer's memo."""
        self.word_cache.clear()
        self.model.cache.clear()
        if self.byte_level_plan is not None:
            self.byte_level_plan.clear()

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of `ids`; ids outside the vocabulary are dropped, as tokenizers does."""
        tokens = []
        for token_id in _as_int_list(ids):
            added = self.added_decode_strings.get(token_id)
            if added is not None:
                if not (skip_special_tokens and added in self.special_contents):
                    tokens.append(added)
                continue
            token = self.model.id_to_token.get(token_id)
            if token is not None:
                tokens.append(token)
        if self.decoder is None:
            return " ".join(tokens)
        return "".join(self.decoder(tokens))

    def batch_decode(self, sequences, skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    # -- batch API, chat templates, validation (implemented in their own modules) ----------------

    def __call__(self, texts, padding=True, truncation=False, max_length=None, add_special_tokens=True,
                 padding_side=None, return_tensors="pt"):
        from reference_engine.tokenizer.batch_encoding import encode_batch

        return encode_batch(self, texts, padding=padding, truncation=truncation, max_length=max_length,
                            add_special_tokens=add_special_tokens, padding_side=padding_side or self.padding_side,
                            return_tensors=return_tensors)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = False,
                            chat_template: str | None = None, **kwargs):
        from reference_engine.tokenizer.chat_template import apply_chat_template

        return apply_chat_template(self, messages, add_generation_prompt=add_generation_prompt,
                                   tokenize=tokenize, chat_template=chat_template, **kwargs)

    def validate(self, probes=None) -> list[str]:
        from reference_engine.tokenizer.validate import validate

        return validate(self, probes)

    def __repr__(self) -> str:
        return f"Tokenizer({self.path!r}, vocab_size={self.vocab_size}, len={len(self)})"


def _require(spec: dict, key: str, path: str):
    if not isinstance(spec, dict) or not isinstance(spec.get(key), dict):
        raise ModelDirError(path, f"no {key!r} object in tokenizer.json")
    return spec[key]


def _uses(spec, kind: str) -> bool:
    """Whether a component spec is, or contains in a Sequence, a component of type `kind`."""
    if not isinstance(spec, dict):
        return False
    if spec.get("type") == kind:
        return True
    return any(_uses(s, kind) for key in ("decoders", "pretokenizers", "normalizers", "processors")
               for s in spec.get(key, []) or [])


def _config_chat_template(config: dict) -> str | None:
    template_value = config.get("chat_template")
    if isinstance(template_value, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template_value if isinstance(t, dict)}
        template_value = named.get("default") or next(iter(named.values()), None)
    return template_value if isinstance(template_value, str) else None


def _as_int_list(ids) -> list[int]:
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]
