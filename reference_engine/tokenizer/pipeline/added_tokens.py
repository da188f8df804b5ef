"""Added tokens (tokenizer.json `added_tokens`): strings matched in the text before the model runs.

As in tokenizers' AddedVocabulary: tokens with `normalized: false` are matched in the raw text,
the others in the normalized text; at each position the longest token wins (leftmost-longest);
`single_word` tokens only match between word boundaries; `lstrip`/`rstrip` swallow the whitespace
on that side of the match.
"""
from __future__ import annotations

from dataclasses import dataclass

import re

from reference_engine.errors import ModelDirError

TRIE_MAX_DEPTH = 64   # branch points on one path; deeper tries (adversarial token lists) use the flat alternation


@dataclass(frozen=True, slots=True)
class AddedToken:
    id: int
    content: str
    special: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = False
    single_word: bool = False


def parse_added_tokens(raw, path: str) -> list[AddedToken]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ModelDirError(path, "added_tokens is not a list")
    tokens = []
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int) or not entry.get("content"):
            raise ModelDirError(path, f"added token {entry!r} lacks an integer id or a content string")
        tokens.append(AddedToken(entry["id"], entry["content"], bool(entry.get("special", False)),
                                 bool(entry.get("lstrip", False)), bool(entry.get("rstrip", False)),
                                 bool(entry.get("normalized", not entry.get("special", False))),
                                 bool(entry.get("single_word", False))))
    return tokens


class AddedTokenMatcher:
    """Finds one class of added tokens (raw or normalized) in text, leftmost-longest."""

    def __init__(self, tokens: list[AddedToken], normalize=None):
        self.by_content: dict[str, AddedToken] = {}
        for token in tokens:
            key = normalize(token.content) if normalize and token.normalized else token.content
            self.by_content.setdefault(key, token)
        self.pattern = re.compile(longest_match_pattern(list(self.by_content))) if self.by_content else None

    def split(self, text: str) -> list[tuple[str, AddedToken | None]]:
        """Cut `text` into (segment, None) stretches of plain text and (content, token) matches."""
        if self.pattern is None or not text:
            return [(text, None)]
        out: list[tuple[str, AddedToken | None]] = []
        consumed = 0
        for m in self.pattern.finditer(text):
            start, stop = m.span()
            token = self.by_content[m.group()]
            if start < consumed:
                continue  # inside whitespace an rstrip token already swallowed
            if token.single_word and not _is_whole_word(text, start, stop):
                continue
            if token.lstrip:
                start = max(_skip_space_left(text, start), consumed)
            if token.rstrip:
                stop = _skip_space_right(text, stop)
            if consumed < start:
                out.append((text[consumed:start], None))
            out.append((text[start:stop], token))
            consumed = stop
        if consumed < len(text):
            out.append((text[consumed:], None))
        return out


def longest_match_pattern(words: list[str]) -> str:
    """A regex matching, at each position, the longest of `words` that starts there.

    A flat alternation sorted longest first would do, but the regex engine tries its branches one by one at every
    position: Gemma 3's 6384 added tokens made that 50 ms per 100 KB. As a trie ("<(?:unused(?:0|1...)|b>|...)")
    each position costs one branch per character matched; a terminal node's tail is an optional, greedy group,
    so a longer token wins and the engine backtracks to the shorter one when the longer does not match."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}   # a word ends here
    pattern = _trie_pattern(trie, 0)
    if pattern is None:
        return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return pattern


def _trie_pattern(node: dict, depth: int) -> str | None:
    if depth > TRIE_MAX_DEPTH:
        return None
    branches = []
    for char, child in sorted(node.items()):
        if not char:
            continue
        literal = re.escape(char)
        while len(child) == 1 and "" not in child:   # a chain of single children is one literal run
            (char, child), = child.items()
            literal += re.escape(char)
        tail = _trie_pattern(child, depth + 1)
        if tail is None:
            return None
        branches.append(literal + tail)
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in node else body


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _is_whole_word(text: str, start: int, stop: int) -> bool:
    before_ok = start == 0 or not _is_word_char(text[start - 1])
    after_ok = stop == len(text) or not _is_word_char(text[stop])
    return before_ok and after_ok


def _is_space(char: str) -> bool:
    """Rust's char::is_whitespace (Unicode White_Space): str.isspace minus the \x1c-\x1f separators."""
    return char.isspace() and char not in "\x1c\x1d\x1e\x1f"


def _skip_space_left(text: str, start: int) -> int:
    while start > 0 and _is_space(text[start - 1]):
        start -= 1
    return start


def _skip_space_right(text: str, stop: int) -> int:
    while stop < len(text) and _is_space(text[stop]):
        stop += 1
    return stop
