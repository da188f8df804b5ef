"""The built-in text: a few KB written for the project (prose in several languages and scripts, code, numbers),
shipped as package data (probes/competence/text/*.txt). The model's tokenizer decides which parts apply: a part
counts when the tokenizer round-trips it and knows its script (at least MIN_CHARS_PER_TOKEN characters per
token: a vocabulary that spells a script byte by byte (CJK in an English BPE: 0.5 characters per token) was not
trained on it, and a model cannot be held to a language its vocabulary never saw; digits one per token still
count). The parts that apply are read as one document (BOS, then each part's first tokens, a blank line
between), so one prefill scores them all."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

PARTS = ("prose_en", "prose_fr", "prose_de", "prose_es", "prose_ru", "prose_zh", "prose_ja",
         "code_py", "code_c", "numbers")
MIN_CHARS_PER_TOKEN = 1.0     # byte fallback spells CJK at ~0.5 characters/token; a vocabulary with the script: 1.3+
QUICK_TOKENS = 256            # text tokens in all under --quick (the cost of check --quick)
FULL_TOKENS = 512             # otherwise (a [tokens, vocab] float32 logits block: 0.5 GB at Gemma's 262k vocabulary)
MIN_PART_TOKENS = 16          # a part cut shorter than this says little beyond its first, context-free tokens
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class TextPart:
    name: str                 # "prose_en", "code_py", ... (PARTS)
    text: str


@dataclass(frozen=True)
class Span:
    """A part's place in TextPrompt.ids: tokens [start, end)."""
    name: str
    start: int
    end: int
    chars_per_token: float


@dataclass(frozen=True)
class TextPrompt:
    """The applicable parts as one document. Score every next-token log-prob (ids[1:]): the text's tokens and
    the separators, never the BOS (without a BOS the first token is context only). `scored_ids` are the tokens
    those log-probs score (the unigram baseline is computed on them)."""
    ids: tuple[int, ...]
    spans: tuple[Span, ...]
    skipped: dict             # part name -> why it does not apply

    @property
    def scored_ids(self) -> tuple[int, ...]:
        return self.ids[1:]

    @property
    def parts(self) -> list[str]:
        return [s.name for s in self.spans]


def builtin_parts() -> list[TextPart]:
    """Every part of the built-in text, in PARTS order."""
    root = resources.files("probes.competence") / "text"
    return [TextPart(name, (root / f"{name}.txt").read_text(encoding="utf-8")) for name in PARTS]


def bos_prefix(tokenizer) -> list[int]:
    """[BOS] when the tokenizer adds one to what it encodes, else []."""
    bos = getattr(tokenizer, "bos_token_id", None)
    adds = bool(getattr(tokenizer, "add_bos_token", False))
    return [int(bos)] if adds and bos is not None else []


def encode_part(tokenizer, part: TextPart) -> tuple[list[int] | None, float, str]:
    """(the part's token ids, characters per token, "") when it applies, else (None, rate, why not).
    `tokenizer`: encode(text, add_special_tokens=False) and decode(ids) (the engine's Tokenizer or
    transformers')."""
    text = part.text.strip()
    ids = [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]
    if not ids:
        return None, 0.0, "encodes to nothing"
    rate = len(text) / len(ids)
    if " ".join(tokenizer.decode(ids).split()) != " ".join(text.split()):
        return None, rate, "does not round-trip through the tokenizer"
    if rate < MIN_CHARS_PER_TOKEN:
        return None, rate, f"{rate:.2f} characters per token: the vocabulary does not know this script"
    return ids, rate, ""


def text_prompt(tokenizer, quick: bool = False, max_tokens: int | None = None,
                parts: list[TextPart] | None = None) -> TextPrompt:
    """The built-in text as this tokenizer reads it: every applicable part, each cut to an even share of
    QUICK_TOKENS (quick) or FULL_TOKENS, and the whole to max_tokens (the model's context) when given."""
    encoded, skipped = [], {}
    for part in parts if parts is not None else builtin_parts():
        try:
            ids, rate, why = encode_part(tokenizer, part)
        except Exception as e:          # a tokenizer that cannot encode a part leaves it out, with the reason
            ids, rate, why = None, 0.0, f"cannot be encoded ({type(e).__name__}: {e})"
        if ids is None:
            skipped[part.name] = why
        else:
            encoded.append((part.name, ids, rate))
    sep = [int(t) for t in tokenizer.encode(SEPARATOR, add_special_tokens=False)] if encoded else []
    total = QUICK_TOKENS if quick else FULL_TOKENS
    if max_tokens is not None:
        total = min(total, max_tokens - 1)
    share = max(MIN_PART_TOKENS, total // max(len(encoded), 1))
    ids, spans = bos_prefix(tokenizer), []
    for name, part_ids, rate in encoded:
        room = total + 1 - len(ids) - len(sep)
        if room < MIN_PART_TOKENS:
            skipped[name] = "no room left in the token budget"
            continue
        take = part_ids[:min(share, room)]
        spans.append(Span(name, len(ids), len(ids) + len(take), rate))
        ids += take + sep
    return TextPrompt(tuple(ids), tuple(spans), skipped)
