"""The hot path of byte-level pre-tokenizers: Isolated regex splits in turn, then the byte alphabet, on plain strings.

GPT-2, Llama-3, Qwen2 and SmolLM2 (one regex, then ByteLevel) and llama.cpp's GGUF pre-tokenizers (DeepSeek,
StarCoder, Falcon, Command-R...: several regexes in turn, then ByteLevel) have this shape. Recognising it lets the
tokenizer cache ids per raw word and skip Piece objects and per-word byte mapping.

An Isolated split keeps the matches of its regex P and the gaps between them. The isolating form of P,
`P|(?:(?!P).)+`, tries P at each position and otherwise takes the run of characters at which P does not match,
so its findall() lists the matches and gaps in order, in C, scanning exactly as finditer(P) does. A P that
matches the empty string shows up as "" in that list: `words` then returns None and the general Piece pipeline
(pre_tokenizers.py) handles the text, as it does any pre-tokenizer of another shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import regex

from reference_engine.tokenizer.pipeline.pre_tokenizers import GPT2_REGEX

MEMO_MAX_ENTRIES = 100_000
BACKREFERENCE = regex.compile(r"\\[1-9]|\(\?P=|\\g<")   # a pattern the isolating form would renumber


@dataclass(frozen=True)
class ByteLevelPlan:
    splits: tuple[Callable[[str], list[str]], ...]   # each: text -> matches and gaps of one regex, in order
    add_prefix_space: bool
    # after the first regex, the pieces are word-like and repeat: their splits are cached (one dict per regex)
    memos: tuple[dict[str, list[str]], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "memos", tuple({} for _ in self.splits[1:]))

    def words(self, text: str) -> list[str] | None:
        """The pre-tokenized words of `text` (before the byte alphabet), or None if a regex matched empty."""
        words = self.splits[0](text)
        for split, memo in zip(self.splits[1:], self.memos):
            if "" in words:
                return None
            out: list[str] = []
            get = memo.get
            for word in words:
                got = get(word)
                if got is None:
                    got = split(word)
                    if len(memo) >= MEMO_MAX_ENTRIES:
                        memo.clear()   # bounded memory on adversarial input
                    memo[word] = got
                out += got
            words = out
        return None if "" in words else words

    def clear(self) -> None:
        for memo in self.memos:
            memo.clear()


def isolating_split(pattern: str) -> Callable[[str], list[str]] | None:
    """text -> the matches of `pattern` and the gaps between them, in order (None: not expressible here)."""
    if BACKREFERENCE.search(pattern):
        return None
    try:
        compiled = regex.compile(f"(?:{pattern})|(?:(?!(?:{pattern}))(?s:.))+")
    except regex.error:
        return None
    if compiled.groups == 0:
        return compiled.findall
    return lambda text: [m.group() for m in compiled.finditer(text)]   # findall would list the groups


def byte_level_plan(spec: dict | None) -> ByteLevelPlan | None:
    """The plan of a ByteLevel pre-tokenizer using its regex, or of a Sequence of Isolated, non-inverted Split
    regexes ending in a ByteLevel without regex and prefix space; None for any other shape."""
    if not isinstance(spec, dict):
        return None
    if spec.get("type") == "ByteLevel" and spec.get("use_regex", True):
        split = isolating_split(GPT2_REGEX)
        return ByteLevelPlan((split,), bool(spec.get("add_prefix_space", True))) if split else None
    steps = spec.get("pretokenizers") if spec.get("type") == "Sequence" else None
    if not steps or len(steps) < 2:
        return None
    *splits, last = steps
    if not (last.get("type") == "ByteLevel" and not last.get("use_regex", True)
            and not last.get("add_prefix_space", True)):
        return None
    if not all(s.get("type") == "Split" and "Regex" in s.get("pattern", {}) and s.get("behavior") == "Isolated"
               and not s.get("invert", False) for s in splits):
        return None
    compiled = tuple(isolating_split(s["pattern"]["Regex"]) for s in splits)
    return ByteLevelPlan(compiled, False) if None not in compiled else None
