"""What a check reports (Finding), how a check run ended (CheckRun) and the whole result (Report).

These names and the fields of `Finding.as_dict()` are a contract: the JSON report, JUnit/HTML renderers and
other tools parse them. Reports depend only on this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

# "selftest": the reference engine checking itself on this model's shapes (findings there are llmdoctor bugs)
CATEGORIES = ("files", "config", "weights", "vocab", "embeddings", "tokenizer", "golden", "activations",
              "kv_cache", "numerics", "generation", "gpu", "environment", "selftest",
              "diff",  # diff: `llmdoctor diff REF CAND`, two models compared (checks/diff/)
              "endpoint",  # endpoint: a live server vs the reference (checks/endpoint/)
              "quantization",  # quantized safetensors (GPTQ, AWQ, compressed-tensors, FP8, bitsandbytes): QNT
              "adapter",  # a LoRA adapter against its base: LRA
              "competence",  # does the model read text at all (no second model): CMP; late, so it sees the rest
              "context")  # does it still read far out (copies and passages at distance): CTX
STATUSES = ("passed", "failed", "skipped", "crashed")
FAIL_ON = ("error", "warning", "never")


class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """Order for comparisons: error (2) > warning (1) > info (0)."""
        return _RANK[self]

    @classmethod
    def parse(cls, value: "Severity | str") -> "Severity":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown severity {value!r} (expected one of: info, warning, error)") from None


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


def fail_on_rank(fail_on: str) -> int | None:
    """The lowest severity rank that fails a run; None for 'never'."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"unknown fail-on level {fail_on!r} (expected one of: {', '.join(FAIL_ON)})")
    return None if fail_on == "never" else Severity(fail_on).rank


@dataclass(frozen=True)
class Location:
    """Where a finding is: `file` relative to the model path as the user gave it (forward slashes), a 1-based
    `line` in a text file (None: not resolved yet or a binary file), and a `logical` name (config key, tensor
    name, token id, layer/module)."""
    file: str | None = None
    line: int | None = None
    logical: str | None = None

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "logical": self.logical}


@dataclass(frozen=True)
class Finding:
    check: str                 # stable check id, e.g. "VOC001"
    category: str              # one of CATEGORIES
    severity: Severity
    message: str               # one line
    evidence: dict = field(default_factory=dict)  # the numbers/names that prove it (JSON-serialisable)
    hint: str = ""             # how to fix it
    data: dict | None = None   # optional plot data, see docs/report-schema.md
    location: Location | None = None   # where it is (file, line, logical name)
    fingerprint: str | None = None     # stable identity across runs (llmdoctor/reporting/locate.py), for --known and CI
    known: bool = False                # matched in the --known report: shown, but never fails the gate

    def __post_init__(self):
        object.__setattr__(self, "severity", Severity.parse(self.severity))
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r} (expected one of: {', '.join(CATEGORIES)})")
        # a message is one line: renderers and CI annotations rely on it
        object.__setattr__(self, "message", " ".join(str(self.message).split()))

    def fails(self, fail_on: str) -> bool:
        """Whether this finding is at or above the --fail-on level (a known finding never fails)."""
        rank = fail_on_rank(fail_on)
        return rank is not None and not self.known and self.severity.rank >= rank

    def as_dict(self) -> dict:
        return {"check": self.check, "category": self.category, "severity": self.severity.value,
                "message": self.message, "evidence": dict(self.evidence), "hint": self.hint, "data": self.data}


@dataclass(frozen=True)
class CheckRun:
    """How one check ended. failed = it reported a warning or error; info findings alone still pass."""
    id: str
    category: str
    status: str                # one of STATUSES
    duration_s: float
    summary: str = ""
    reason: str = ""           # why it was skipped / how it crashed

    def as_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "status": self.status,
                "duration_s": round(self.duration_s, 6), "summary": self.summary, "reason": self.reason}


@dataclass
class Report:
    model: str                 # the model directory as given
    fingerprint: str | None    # sha256 of config.json + safetensors headers, see llmdoctor.run.fingerprint
    tool_version: str
    generated_at: str          # ISO 8601, UTC
    checks: list[CheckRun] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    fail_on: str = "error"
    duration_s: float = 0.0
    device: str = "cpu"
    dtype: str = "float32"
    resources: dict[str, float] = field(default_factory=dict)  # seconds to build config/weights/engine/...
    plan: dict | None = None   # the memory plan of an engine run (reference_engine/budget/plan.py), None without one
    known_report: str | None = None  # the --known report findings were matched against (None: no baseline)
    load: dict | None = None   # `probe load`'s measurements (levels, options, server metrics), None otherwise

    def failing(self, fail_on: str | None = None) -> list[Finding]:
        """Findings at or above fail_on (the report's own level by default)."""
        level = self.fail_on if fail_on is None else fail_on
        return [f for f in self.findings if f.fails(level)]

    def exit_code(self, fail_on: str | None = None) -> int:
        """0 when nothing is at or above fail_on, 1 otherwise (2 is the CLI's for bad input)."""
        return 1 if self.failing(fail_on) else 0

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity.value == severity)

    def status_count(self, status: str) -> int:
        return sum(1 for run in self.checks if run.status == status)

    def findings_for(self, check_id: str) -> list[Finding]:
        return [f for f in self.findings if f.check == check_id]

    def categories(self) -> list[str]:
        """Categories present in this report, in catalogue order."""
        present = {run.category for run in self.checks} | {f.category for f in self.findings}
        return [c for c in CATEGORIES if c in present]
