"""Which parts of the built-in text a server can be held to, decided from its own tokenizer (no model at hand).

probes/competence/corpus.py holds a model to a part when its tokenizer round-trips the part at at least
MIN_CHARS_PER_TOKEN characters per token. A server says how many tokens a text is (`Surface.tokenize`, its BOS
counted once: the tokens of "" are subtracted); a server that cannot tokenize is held to every part, and a part
its echoed tokens do not spell back is left out then (probes/endpoint/competence_probe.py). Each part is cut at
a word boundary to about PART_TOKENS tokens so a slow server scores the whole text in bounded time.
"""
from __future__ import annotations

from dataclasses import dataclass

from probes.competence.corpus import MIN_CHARS_PER_TOKEN, TextPart, builtin_parts

PART_TOKENS = 48       # per part: ~8 parts apply, ~400 scored tokens in all (the engine's --quick reads 256)


@dataclass(frozen=True)
class PlannedPart:
    part: TextPart                 # the part, cut to about PART_TOKENS tokens
    chars_per_token: float | None  # the server's rate on the whole part (None: the server cannot tokenize)


def plan_parts(tokenize, parts: list[TextPart] | None = None) -> tuple[list[PlannedPart], dict[str, str]]:
    """(the parts to score, cut; {part name: why it is left out}). `tokenize`: Surface.tokenize or a cached
    version of it (EndpointInputs.tokenize). EndpointError when a tokenize request fails."""
    parts = parts if parts is not None else builtin_parts()
    bos = tokenize("")
    planned, skipped = [], {}
    for part in parts:
        text = part.text.strip()
        ids = None if bos is None else tokenize(text)
        if ids is None:
            planned.append(PlannedPart(TextPart(part.name, cut(text, PART_TOKENS * 4)), None))
            continue
        count = max(len(ids) - len(bos), 1)
        rate = len(text) / count
        if rate < MIN_CHARS_PER_TOKEN:
            skipped[part.name] = f"{rate:.2f} characters per token: the served vocabulary does not know this script"
            continue
        planned.append(PlannedPart(TextPart(part.name, cut(text, int(PART_TOKENS * rate))), rate))
    return planned, skipped


def cut(text: str, chars: int) -> str:
    """The text's first `chars` characters, ended at the last whitespace before the limit when there is one."""
    if len(text) <= chars:
        return text
    head = text[:chars]
    space = max(head.rfind(" "), head.rfind("\n"))
    return head[:space] if space > chars // 2 else head
