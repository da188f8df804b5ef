"""Build a Tokenizer from a GGUF file's `tokenizer.ggml.*` metadata, the way llama.cpp reads it.

- `gpt2`: byte-level BPE; an in-memory tokenizer.json equivalent (vocab, merges, the pre-tokenizer regexes
  `tokenizer.ggml.pre` selects, ByteLevel) goes through the same components as a Hugging Face directory.
- `llama`: SentencePiece-style; the same Tokenizer with the score-based SpmModel (spm.py) in place of BPE,
  a "▁" space prefix (add_space_prefix) and byte fallback.
Token types CONTROL/USER_DEFINED/UNKNOWN become added tokens matched in raw text (llama.cpp's special-token
partition with parse_special); CONTROL ones are special (skipped by decode(skip_special_tokens=True)).
BOS/EOS follow tokenizer.ggml.add_bos_token / add_eos_token, else llama.cpp's implicit defaults.
`tokenizer.chat_template` renders in the same jinja2 sandbox as any chat template.
"""
from __future__ import annotations

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.gguf_file import GGUFFile
from reference_engine.tokenizer.sources.gguf_pre import REGEXES, pre_tokenizer_for
from reference_engine.tokenizer.models.pieces import CONTROL, NORMAL, SPACE, UNKNOWN, USER_DEFINED
from reference_engine.tokenizer.models.spm import SpmModel

ADDED_TYPES = (UNKNOWN, CONTROL, USER_DEFINED)
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def tokenizer_from_gguf(gguf: GGUFFile, tokenizer_cls):
    """A `tokenizer_cls` (tokenizer.Tokenizer, which calls this from Tokenizer.from_gguf: the class is passed
    in so that this module does not import tokenizer.py back) over the GGUF's tokenizer.ggml.* metadata."""
    model = gguf.get("tokenizer.ggml.model")
    tokens = gguf.get("tokenizer.ggml.tokens")
    where = str(gguf.path)
    if not isinstance(model, str):
        raise ModelDirError(gguf.path, "no tokenizer.ggml.model in the GGUF metadata (no tokenizer)")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise ModelDirError(gguf.path, "tokenizer.ggml.tokens is missing or not a list of strings")
    types = _int_list(gguf, "tokenizer.ggml.token_type", len(tokens), NORMAL)
    if model == "gpt2":
        spec, add_bos = _bpe_spec(gguf, tokens), _pre(gguf).add_bos
    elif model == "llama":
        spec, add_bos = _spm_spec(gguf, tokens), True
    else:
        raise UnsupportedError(gguf.path, f"tokenizer model {model!r} (supported: gpt2 BPE, llama SentencePiece)")
    add_bos = _flag(gguf, "tokenizer.ggml.add_bos_token", add_bos)
    add_eos = _flag(gguf, "tokenizer.ggml.add_eos_token", False)
    spec["added_tokens"] = [{"id": i, "content": t, "special": types[i] != USER_DEFINED, "normalized": False,
                             "lstrip": False, "rstrip": False, "single_word": False}
                            for i, t in enumerate(tokens) if types[i] in ADDED_TYPES and t]
    config, ids = _special_tokens(gguf, tokens)
    config.update(add_bos_token=add_bos, add_eos_token=add_eos)
    spec["post_processor"] = _template(config, ids, add_bos, add_eos)
    template = gguf.get("tokenizer.chat_template")
    tok = tokenizer_cls(spec, config, where, template if isinstance(template, str) else None)
    if model == "llama":
        scores = gguf.get("tokenizer.ggml.scores")
        if not isinstance(scores, list) or len(scores) != len(tokens):
            raise ModelDirError(gguf.path, "tokenizer.ggml.scores must list one score per token")
        tok.model = SpmModel(vocab=tok.model.vocab, scores=[float(s) for s in scores],
                             unk_id=ids.get("unk_token"))
    tok.gguf_types = types
    tok.gguf_spec = spec   # the tokenizer.json equivalent (checks read its tables)
    return tok


def _pre(gguf: GGUFFile):
    pre = gguf.get("tokenizer.ggml.pre")
    entry = pre_tokenizer_for(pre if isinstance(pre, str) else None)
    if entry is None:
        raise UnsupportedError(gguf.path, f"unknown or unsupported pre-tokenizer tokenizer.ggml.pre = {pre!r}")
    return entry


def _bpe_spec(gguf: GGUFFile, tokens: list[str]) -> dict:
    merges = gguf.get("tokenizer.ggml.merges")
    if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
        raise ModelDirError(gguf.path, "tokenizer.ggml.merges is missing or not a list of strings")
    pre = _pre(gguf)
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
              for r in REGEXES[pre.regex_kind]]
    return {"model": {"type": "BPE", "vocab": _vocab(tokens), "merges": merges, "ignore_merges": pre.ignore_merges},
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [*splits, BYTE_LEVEL]},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}}


def _spm_spec(gguf: GGUFFile, tokens: list[str]) -> dict:
    prefix = _flag(gguf, "tokenizer.ggml.add_space_prefix", True)
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    normalizers = [{"type": "Prepend", "prepend": SPACE}, replace] if prefix else [replace]
    decoders = [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}]
    if prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"model": {"type": "BPE", "vocab": _vocab(tokens), "merges": [], "byte_fallback": True},
            "normalizer": {"type": "Sequence", "normalizers": normalizers}, "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": decoders}}


def _vocab(tokens: list[str]) -> dict[str, int]:
    return {t: i for i, t in enumerate(tokens)}   # a repeated text keeps its last id, as in llama.cpp


def _special_tokens(gguf: GGUFFile, tokens: list[str]) -> tuple[dict, dict]:
    """({bos_token: text, ...} for the tokenizer config, {bos_token: id, ...}); llama.cpp's SPM defaults
    (BOS 1, EOS 2, UNK 0) apply when the ids are not in the metadata."""
    spm = gguf.get("tokenizer.ggml.model") == "llama"
    defaults = {"bos": 1 if spm else None, "eos": 2 if spm else None, "unknown": 0 if spm else None}
    config: dict = {}
    ids: dict = {}
    for key, name in (("bos", "bos_token"), ("eos", "eos_token"), ("unknown", "unk_token"),
                      ("padding", "pad_token")):
        value = gguf.get(f"tokenizer.ggml.{key}_token_id", defaults.get(key))
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(tokens):
            config[name], ids[name] = tokens[value], value
    return config, ids


def _template(config: dict, ids: dict, add_bos: bool, add_eos: bool) -> dict:
    single, specials = [], {}
    for flag, name in ((add_bos, "bos_token"), (None, None), (add_eos, "eos_token")):
        if name is None:
            single.append({"Sequence": {"id": "A", "type_id": 0}})
        elif flag and name in config:
            single.append({"SpecialToken": {"id": config[name], "type_id": 0}})
            specials[config[name]] = {"id": config[name], "ids": [ids[name]], "tokens": [config[name]]}
    return {"type": "TemplateProcessing", "single": single, "pair": single, "special_tokens": specials}


def _flag(gguf: GGUFFile, key: str, default: bool) -> bool:
    value = gguf.get(key)
    return value if isinstance(value, bool) else default


def _int_list(gguf: GGUFFile, key: str, n: int, default: int) -> list[int]:
    value = gguf.get(key)
    if value is None:
        return [default] * n
    if not isinstance(value, list) or len(value) != n:
        raise ModelDirError(gguf.path, f"{key} must list one entry per token ({n}), found "
                                       f"{len(value) if isinstance(value, list) else type(value).__name__}")
    return [v if isinstance(v, int) else default for v in value]
