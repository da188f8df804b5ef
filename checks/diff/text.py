"""Text-side analyses of `llmdoctor diff`: the built-in multilingual corpus, a unified diff of two renderings,
and the first span where two tokenizations of the same line part ways."""
from __future__ import annotations

import difflib
from dataclasses import dataclass

# one line each: scripts, digits, code, whitespace runs, emoji, special-looking text (where tokenizers differ)
CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "  Leading spaces,\ttabs and   runs of   spaces.",
    "Numbers: 3.14159, 1,000,000 and 2024-06-30.",
    "def f(x):\n    return x ** 2  # square",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "¿Dónde está la biblioteca? ¡Aquí!",
    "Съешь же ещё этих мягких французских булок.",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "日本語のテキストをトークン化します。",
    "中文分词测试：今天天气很好。",
    "한국어 문장도 토큰화합니다.",
    "ข้อความภาษาไทยสำหรับการทดสอบ",
    "हिन्दी में एक वाक्य।",
    "مرحبا بالعالم",
    "Emoji: 😀👍🏽🇫🇷 and symbols ∑∫√≈≠.",
    "URL https://example.com/a?b=c&d=e#frag and e-mail a.b@example.org",
    "<|im_start|>user text that looks like a special token<|im_end|>",
    "Mixed-CASE words, camelCase, snake_case and SHOUTING.",
    "Line one\nLine two\r\nLine three\n\n\nafter blank lines",
)
def unified(a: str, b: str, a_name: str, b_name: str, context: int = 2, limit: int = 60) -> list[str]:
    """Unified diff lines of two texts (line endings shown), at most `limit` lines."""
    lines = list(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True), a_name, b_name,
                                      n=context))
    out = [line.rstrip("\n").replace("\r", "\\r") for line in lines]
    return out[:limit] + ([f"... {len(out) - limit} more lines"] if len(out) > limit else [])


@dataclass(frozen=True)
class Span:
    """The first region where two id sequences of the same text differ: the ids on each side and the text."""
    start_ref: int
    start_cand: int
    ref_ids: list[int]
    cand_ids: list[int]
    ref_text: str
    cand_text: str


def first_span(ref_ids: list[int], cand_ids: list[int], ref_decode, cand_decode, pad: int = 0) -> Span | None:
    """None when equal; else the first differing opcode of a sequence match (plus `pad` ids of context)."""
    if ref_ids == cand_ids:
        return None
    matcher = difflib.SequenceMatcher(a=ref_ids, b=cand_ids, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        i1, j1 = max(i1 - pad, 0), max(j1 - pad, 0)
        a, b = ref_ids[i1:i2 + pad], cand_ids[j1:j2 + pad]
        return Span(i1, j1, a, b, _decode(ref_decode, a), _decode(cand_decode, b))
    return None


def _decode(decode, ids: list[int]) -> str:
    try:
        return decode(ids)
    except Exception as e:  # an id the other tokenizer does not know: show why instead of failing
        return f"<cannot decode: {type(e).__name__}>"
