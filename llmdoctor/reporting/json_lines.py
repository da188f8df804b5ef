"""Which line of a JSON file holds a key: a small tokenizer of JSON text that follows the nesting, so that
`"vocab_size"` inside `text_config` is not mistaken for the top-level one. Only strings, brackets, colons and
commas matter; numbers and literals are skipped. Invalid JSON simply yields the keys found before the damage."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

# a string (with escapes), or one structural character
TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\]:,]')
MAX_SCAN_BYTES = 256 * 2**20   # larger files (a huge tokenizer.json) are not scanned: the finding keeps line 1


def key_lines(text: str) -> Iterator[tuple[tuple, int]]:
    """(key path, 1-based line of the key) for every object key, in file order; a path holds the keys of the
    enclosing objects and the positions in enclosing arrays."""
    stack: list[list] = []          # per open container: [kind, current key or index]
    line, last = 1, 0
    pending: str | None = None      # a string seen in an object, a key when a colon follows
    pending_line = 0
    for match in TOKEN.finditer(text):
        token = match.group()
        line += text.count("\n", last, match.start())
        last = match.start()
        if token == ":":
            if pending is not None and stack and stack[-1][0] == "{":
                stack[-1][1] = pending
                yield tuple(entry[1] for entry in stack), pending_line
            pending = None
        elif token[0] == '"':
            if stack and stack[-1][0] == "{":
                try:
                    pending, pending_line = json.loads(token), line
                except ValueError:
                    pending = None
        elif token in "{[":
            stack.append([token, 0 if token == "[" else None])
        elif token in "}]":
            if stack:
                stack.pop()
        elif token == "," and stack and stack[-1][0] == "[":
            stack[-1][1] += 1


def find_key_line(path: Path, logical: str) -> int | None:
    """The line of the key `logical` names: the exact key path (a top-level key may itself contain dots, such as
    a tensor name in weight_map), else a dotted path (`text_config.vocab_size`), else the shallowest key with
    that last name. None when the file is not there, too large or has no such key."""
    try:
        if path.stat().st_size > MAX_SCAN_BYTES:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    wanted = [(logical,), tuple(logical.split(".")), ("weight_map", logical)]
    last_name = logical.rsplit(".", 1)[-1]
    best: tuple[int, int] | None = None        # (depth, line) of the shallowest match on the last name
    for keys, line in key_lines(text):
        if keys in wanted:
            return line
        if keys[-1] == last_name and (best is None or len(keys) < best[0]):
            best = (len(keys), line)
    return best[1] if best else None
