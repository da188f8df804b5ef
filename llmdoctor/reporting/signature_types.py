"""What a known error signature or published incident is (llmdoctor.reporting.signatures holds the error table,
llmdoctor.reporting.incidents the incidents), and what matching one in a text yields."""
from __future__ import annotations

import re
from dataclasses import dataclass, field


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
        # an EPT id is a live endpoint check: `check` never runs it, `probe endpoint` does
        static = [c for c in self.checks if not c.startswith("EPT")]
        live = [c for c in self.checks if c.startswith("EPT")]
        commands = []
        if static:
            commands.append(f"llmdoctor check {model_dir} --select {','.join(static)}")
        if live:
            commands.append(f"llmdoctor probe endpoint URL --model {model_dir} --select {','.join(live)}")
        for probe in self.probes:
            command = probe.replace("MODEL_DIR", model_dir)
            if command not in commands:
                commands.append(command)
        return commands


@dataclass(frozen=True)
class SignatureMatch:
    signature: Signature
    excerpt: str                     # the matched text
    values: dict                     # named groups of the pattern (e.g. the token id)
