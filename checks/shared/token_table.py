"""The token table of tokenizer.json read as data (no tokenizer built): model vocab, merges and added tokens.

The structural tokenizer checks need it even when the tokenizer cannot be built (that is what they explain),
and the vocab/embedding checks use it to know every id the tokenizer can emit and the special ids."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reference_engine.config import read_json

SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


@dataclass
class TokenTable:
    model_type: str
    vocab: dict[str, int]                  # model vocab, token -> id (first id when a token repeats)
    vocab_pairs: list[tuple[str, int]]     # every (token, id) entry as stored, duplicates included
    merges: list[tuple[str, str]]
    added: list[dict]                      # tokenizer.json added_tokens entries with an int id
    raw: dict = field(repr=False, default_factory=dict)

    @property
    def added_ids(self) -> list[int]:
        return [a["id"] for a in self.added]

    @property
    def special_added_ids(self) -> list[int]:
        return [a["id"] for a in self.added if a.get("special")]

    def all_ids(self) -> set[int]:
        return {i for _, i in self.vocab_pairs} | set(self.added_ids)

    def max_id(self) -> int:
        ids = self.all_ids()
        return max(ids) if ids else -1

    def token_to_id(self, token: str) -> int | None:
        for a in self.added:
            if a.get("content") == token:
                return a["id"]
        return self.vocab.get(token)

    def id_to_token(self) -> dict[int, str]:
        out = {i: t for t, i in self.vocab_pairs}
        out.update({a["id"]: a.get("content", "") for a in self.added})
        return out

    def is_byte_level(self) -> bool:
        return _mentions(self.raw.get("pre_tokenizer"), "ByteLevel") or _mentions(self.raw.get("decoder"), "ByteLevel")

    def has_byte_fallback(self) -> bool:
        return bool(self.raw.get("model", {}).get("byte_fallback"))


def load_token_table(model_dir: Path) -> TokenTable:
    """Parse tokenizer.json's tables; ModelDirError when the file is missing or not JSON."""
    return table_from_spec(read_json(Path(model_dir) / "tokenizer.json"))


def table_from_spec(raw: dict) -> TokenTable:
    """The tables of a tokenizer.json dict (a file's, or the equivalent a GGUF tokenizer was built from)."""
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    pairs = _vocab_pairs(model.get("vocab"))
    vocab: dict[str, int] = {}
    for token, i in pairs:
        vocab.setdefault(token, i)
    listed = raw.get("added_tokens") if isinstance(raw.get("added_tokens"), list) else []   # junk: none
    added = [a for a in listed if isinstance(a, dict) and isinstance(a.get("id"), int)]
    return TokenTable(str(model.get("type", "BPE" if "merges" in model else "")), vocab, pairs,
                      _merge_pairs(model.get("merges")), added, raw)


def token_table(ctx) -> TokenTable:
    """Cached per run in ctx.state."""
    if "token_table" not in ctx.state:
        spec = getattr(ctx.tokenizer, "gguf_spec", None) if ctx.is_gguf else None
        if spec is None and not (ctx.model_dir / "tokenizer.json").is_file() \
                and (ctx.model_dir / "tokenizer.model").is_file():   # SentencePiece only: its tokenizer.json equivalent
            spec = getattr(ctx.tokenizer, "sentencepiece_spec", None)
        ctx.state["token_table"] = table_from_spec(spec) if spec else load_token_table(ctx.model_dir)
    return ctx.state["token_table"]


def _vocab_pairs(vocab) -> list[tuple[str, int]]:
    if isinstance(vocab, dict):                       # BPE / WordPiece: {token: id}
        return [(t, i) for t, i in vocab.items() if isinstance(i, int)]
    if isinstance(vocab, list):                       # Unigram: [[token, score], ...], id = position
        return [(e[0], i) for i, e in enumerate(vocab) if isinstance(e, list) and e and isinstance(e[0], str)]
    return []


def _merge_pairs(merges) -> list[tuple[str, str]]:
    out = []
    for m in merges if isinstance(merges, list) else []:   # junk (a number, an object): no merges
        if isinstance(m, str):
            parts = m.split(" ")
            out.append((parts[0], parts[1]) if len(parts) == 2 else (m, ""))
        elif isinstance(m, list) and len(m) == 2:
            out.append((str(m[0]), str(m[1])))
        else:
            out.append((repr(m), ""))
    return out


def _mentions(spec, type_name: str) -> bool:
    """Whether a (possibly Sequence) normalizer/pre-tokenizer/decoder spec contains a component of this type."""
    if not isinstance(spec, dict):
        return False
    if spec.get("type") == type_name:
        return True
    children = spec.get("pretokenizers") or spec.get("decoders") or spec.get("normalizers") or []
    return any(_mentions(c, type_name) for c in children)


def special_strings(mapping: dict) -> dict[str, str]:
    """{'bos_token': '<s>', ...} from a tokenizer_config.json / special_tokens_map.json dict (str or {content})."""
    out = {}
    for key in SPECIAL_KEYS:
        value = mapping.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out
