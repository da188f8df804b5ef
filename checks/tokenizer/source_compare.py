"""The descriptions of one tokenizer a model directory may hold, read side by side: tokenizer.json (ctx.tokenizer),
a SentencePiece tokenizer.model, a tiktoken-format file (Llama 3's original tokenizer.model, *.tiktoken),
Mistral's tekken.json, a GGUF's tokenizer.ggml.* arrays, and the chat template in its several files.

Disagreements are shown on the smallest input that behaves differently: `smallest_difference` tries candidate
texts shortest first and returns the first one two tokenizers encode differently."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from checks.catalogue.inputs import remembered
from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.models.pieces import CONTROL, SPACE, UNKNOWN
from reference_engine.tokenizer.pipeline.pre_tokenizers import UNICODE_TO_BYTES

SENTENCEPIECE = "sentencepiece (tokenizer.model)"
TRANSFORMERS_READING = "tokenizer.model as transformers reads it"
# plain texts that show a dummy-prefix or whitespace difference, shortest first after sorting
PLAIN_PROBES = ("a", "Hi", " a", "Hello", "Hello world", "  two spaces", "line\nbreak", "x 1", "tab\tx",
                "Hello, world! 123", "日本語", "emoji 😀")
# characters a 32k SentencePiece vocabulary rarely has as pieces: only byte fallback encodes them
RARE_CHARACTERS = ("\x01", "☃", "😀", "\U0001f9ec", "𝔘", "\u0fff", "ꙮ", "\U000e0041")
TEMPLATE_CONVERSATIONS = (
    [{"role": "user", "content": "hi"}],
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "ok"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
)


@dataclass(frozen=True)
class Difference:
    text: str
    left: list[int]
    right: list[int]

    def describe(self, left: str, right: str) -> str:
        return f"{self.text!r} encodes to {self.left[:12]} with {left} but {self.right[:12]} with {right}"

    def evidence(self, left: str, right: str) -> dict:
        return {"input": self.text, left: self.left[:32], right: self.right[:32]}


def smallest_difference(left, right, candidates, add_special_tokens: bool = False) -> Difference | None:
    """The shortest candidate text `left` and `right` (tokenizers) encode differently, or None."""
    for text in sorted(dict.fromkeys(candidates), key=lambda t: (len(t), t)):
        a = left.encode(text, add_special_tokens=add_special_tokens)
        b = right.encode(text, add_special_tokens=add_special_tokens)
        if a != b:
            return Difference(text, a, b)
    return None


def source_root(ctx) -> Path:
    """The directory holding the tokenizer files (a GGUF path's parent)."""
    return ctx.model_dir if ctx.model_dir.is_dir() else ctx.model_dir.parent


def sentencepiece_model(ctx):
    """The parsed SentencePiece tokenizer.model, None when there is none (or it is a tiktoken file); an
    unreadable one raises ModelDirError (TOK001-style checks report it; these skip)."""
    def build():
        from reference_engine.tokenizer.sources.sentencepiece_model import read_sentencepiece_model
        from reference_engine.tokenizer.sources.tiktoken_file import looks_like_tiktoken
        path = source_root(ctx) / "tokenizer.model"
        if not path.is_file() or looks_like_tiktoken(path):
            return None
        return read_sentencepiece_model(path)
    return _cached(ctx, "sentencepiece_model", build)


def spm_tokenizer(ctx, **flags):
    """A tokenizer built from tokenizer.model with tokenizer_config.json's flags, `flags` overriding them
    (legacy=..., add_prefix_space=...): what the declared settings encode."""
    from reference_engine.tokenizer.sources.spm_tokenizer import check_runnable, tokenizer_from_model
    from reference_engine.tokenizer.tokenizer import Tokenizer
    model = sentencepiece_model(ctx)
    key = "spm_tokenizer:" + ",".join(f"{k}={v}" for k, v in sorted(flags.items()))

    def build():
        check_runnable(model)
        return tokenizer_from_model(model, Tokenizer, {**ctx.tokenizer_config, **flags})
    return _cached(ctx, key, build)


def spm_label(ctx, text: str, **flags) -> str:
    """What the tokenizer.model side of a comparison on `text` is. spm_tokenizer encodes as sentencepiece itself
    does, except for CONTROL/UNKNOWN pieces written in the text (sentencepiece never matches them; transformers
    does, and then `legacy` decides the dummy prefix after them) and a tokenizer_config.json add_prefix_space that
    overrides the model's add_dummy_prefix: on such text it is transformers' reading of tokenizer.model."""
    model = sentencepiece_model(ctx)
    prefix = {**ctx.tokenizer_config, **flags}.get("add_prefix_space")
    if isinstance(prefix, bool) and prefix != bool(model.add_dummy_prefix):
        return TRANSFORMERS_READING
    raw_matched = (p for p, t in zip(model.pieces, model.types) if t in (CONTROL, UNKNOWN))
    return TRANSFORMERS_READING if any(p in text for p in raw_matched) else SENTENCEPIECE


def metaspace_skips_leading_space(spec) -> bool:
    """Whether a tokenizer.json pre-tokenizer holds a Metaspace that prepends "▁" ("first"/"always"): tokenizers
    then skips the prefix when the text already starts with "▁", which sentencepiece never does."""
    if not isinstance(spec, dict):
        return False
    if spec.get("type") == "Metaspace":
        return spec.get("prepend_scheme", "always" if spec.get("add_prefix_space", True) else "never") != "never"
    return any(metaspace_skips_leading_space(child) for child in spec.get("pretokenizers") or [])


def json_tokenizer(ctx):
    """ctx.tokenizer when it comes from tokenizer.json, else None."""
    if ctx.is_gguf or not (ctx.model_dir / "tokenizer.json").is_file():
        return None
    return ctx.tokenizer


def _cached(ctx, name: str, build):
    """The source, built once per run in ctx.state (where every check keeps what it shares); a source that
    cannot be read is kept as its ModelDirError and raised again."""
    return remembered(ctx.state, ("tokenizer source", name), build, ModelDirError)


def json_token_bytes(token: str, byte_level: bool) -> bytes:
    """The bytes a tokenizer.json vocabulary string stands for (byte-level strings map back through GPT-2's
    table; others are UTF-8 text with "▁" for a space)."""
    if byte_level and all(c in UNICODE_TO_BYTES for c in token):
        return bytes(UNICODE_TO_BYTES[c] for c in token)
    return token.replace(SPACE, " ").encode("utf-8")


def id_to_json_bytes(tok, byte_level: bool) -> dict[int, bytes]:
    """id -> bytes for every model-vocabulary entry and added token of a tokenizer.json tokenizer."""
    out = {i: json_token_bytes(t, byte_level) for i, t in tok.model.id_to_token.items()}
    out.update({t.id: t.content.encode("utf-8") for t in tok.added_tokens})
    return out


def template_sources(root: Path, tokenizer_config: dict) -> dict[str, dict[str, str]]:
    """template name -> {file it comes from: template text}, for every place a chat template can live."""
    from reference_engine.config import read_json
    out: dict[str, dict[str, str]] = {}

    def add(name: str, source: str, text) -> None:
        if isinstance(text, str):
            out.setdefault(name, {})[source] = text

    value = tokenizer_config.get("chat_template")
    if isinstance(value, list):
        for entry in value:
            if isinstance(entry, dict):
                add(str(entry.get("name")), "tokenizer_config.json", entry.get("template"))
    else:
        add("default", "tokenizer_config.json", value)
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        add("default", "chat_template.jinja", _read_text(jinja))
    legacy_json = root / "chat_template.json"
    if legacy_json.is_file():
        try:
            add("default", "chat_template.json", read_json(legacy_json).get("chat_template"))
        except (ModelDirError, AttributeError):
            pass
    extra = root / "additional_chat_templates"
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            add(path.stem, f"additional_chat_templates/{path.name}", _read_text(path))
    return out


def _read_text(path: Path) -> str | None:
    try:
        if path.stat().st_size > 1 << 20:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def token_table_raw(ctx) -> dict:
    """tokenizer.json as read (no tokenizer built)."""
    from checks.shared.token_table import token_table
    return token_table(ctx).raw
