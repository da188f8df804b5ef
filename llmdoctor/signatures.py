"""From an error message to its likely root causes: the seed's "error -> cause" table, made executable.

`match_signatures(text)` returns the known signatures found in a traceback, a log excerpt or a
symptom described in words ("GPU at 30% but slow"), most specific first. Each names the likely causes
in the order to rule them out and the llmdoctor checks/probes that confirm or clear each one.
The table itself lives in `signature_table.py`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field


SCAN_HEAD, SCAN_TAIL = 8_000, 32_000   # characters of a long text that are matched


@dataclass(frozen=True)
class Signature:
    id: str                          # stable slug, e.g. "index-out-of-range"
    title: str                       # the error as users quote it
    patterns: tuple[str, ...]        # case-insensitive regexes, any one matches
    causes: tuple[str, ...]          # likely root causes, most likely first
    checks: tuple[str, ...] = ()     # `llmdoctor check --select` terms: check ids, id families, categories
    probes: tuple[str, ...] = ()     # other llmdoctor commands that confirm it (MODEL_DIR placeholder)
    immediate: str = ""              # what to do right now to get more information
    references: tuple[str, ...] = () # public bug reports this signature is modelled on
    compiled: tuple[re.Pattern, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "compiled", tuple(re.compile(p, re.IGNORECASE | re.DOTALL) for p in self.patterns))

    def search(self, text: str) -> re.Match | None:
        found = [m for m in (p.search(text) for p in self.compiled) if m]
        return min(found, key=lambda m: m.start()) if found else None

    def confirm_commands(self, model_dir: str = "MODEL_DIR") -> list[str]:
        commands = []
        if self.checks:
            commands.append(f"llmdoctor check {model_dir} --select {','.join(self.checks)}")
        commands += [p.replace("MODEL_DIR", model_dir) for p in self.probes]
        return commands


@dataclass(frozen=True)
class SignatureMatch:
    signature: Signature
    excerpt: str                     # the matched text
    values: dict                     # named groups of the pattern (e.g. the token id)


def match_details(text: str) -> list[SignatureMatch]:
    """Every signature found in `text`, in table order (the table lists specific before generic)."""
    from llmdoctor.signature_table import SIGNATURES

    flat = " ".join(str(text).split())
    if len(flat) > SCAN_HEAD + SCAN_TAIL:  # a whole log: the error is at its end, the command at its start
        flat = flat[:SCAN_HEAD] + " ... " + flat[-SCAN_TAIL:]
    out = []
    for sig in SIGNATURES:
        m = sig.search(flat)
        if m:
            values = {k: v for k, v in m.groupdict().items() if v is not None}
            out.append(SignatureMatch(sig, m.group(0)[:200], values))
    return out


def match_signatures(text: str) -> list[Signature]:
    """The known error signatures in `text` (empty when none is known); never raises on any string."""
    return [m.signature for m in match_details(text)]


def render_explanation(text: str, model_dir: str = "MODEL_DIR") -> str:
    """Plain-text answer for `llmdoctor explain "<error text>"`, graceful on unknown text."""
    matches = match_details(text)
    if not matches:
        return ("No known error signature matched this text.\n"
                f"Collect an incident bundle with `llmdoctor triage {model_dir} -o bundle/` and run "
                f"`llmdoctor check {model_dir}`; `llmdoctor explain CHECK_ID` documents any finding.")
    return "\n\n".join(_render_one(m, model_dir) for m in matches)


def _render_one(match: SignatureMatch, model_dir: str) -> str:
    sig = match.signature
    lines = [f"[{sig.id}] {sig.title}", f"  matched: {match.excerpt!r}"]
    if match.values:
        lines.append("  values: " + ", ".join(f"{k}={v}" for k, v in match.values.items()))
    lines.append("  likely causes:")
    lines += [f"    {i}. {cause}" for i, cause in enumerate(sig.causes, 1)]
    if sig.immediate:
        lines.append(f"  right now: {sig.immediate}")
    commands = sig.confirm_commands(model_dir)
    if commands:
        lines.append("  confirm with:")
        lines += [f"    $ {c}" for c in commands]
    if sig.references:
        lines.append("  seen in: " + ", ".join(sig.references))
    return "\n".join(lines)
