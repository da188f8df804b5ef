"""Turn probe results into a Report, so probes come out through the same renderers as `llmdoctor check`.

Each probe part is recorded as a CheckRun with the id of the finding it produced (KVC9xx: KV probe,
GPU1xx: bandwidth/NVML/decode roofline, ENV1xx: triage environment). A part that could not run is a
"skipped" run with the reason, never a missing line.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone

from llmdoctor import __version__
from findings import CheckRun, Finding, Report

SUMMARIES = {
    "KVC901": "KV occupancy over time (probe kv)",
    "KVC902": "paged block sizes vs contiguous max-length reservation (probe kv)",
    "KVC903": "admissions refused and preemptions (probe kv)",
    "KVC904": "page-table pressure: > 5 blocks/sequence with < 10% free (probe kv)",
    "KVC905": "compaction: when it triggers, what it moves, what it recovers (probe kv)",
    "GPU101": "NVML device state: throttling, ECC, row remapping, PCIe link (probe bandwidth)",
    "GPU102": "achieved memory bandwidth vs NVML peak (probe bandwidth)",
    "GPU103": "batch-1 decode roofline: memory / compute / overhead bound (probe bandwidth --model)",
    "ENV101": "environment: Python, torch, CUDA, driver, CPU, RAM, packages (triage)",
}


class ProbeRecorder:
    """Collects findings and check runs of probe parts; `report()` builds the Report."""

    def __init__(self, model: str, device: str = "cpu", dtype: str = "float32"):
        self.model, self.device, self.dtype = model, device, dtype
        self.findings: list[Finding] = []
        self.runs: list[CheckRun] = []
        self.started = time.perf_counter()
        self.generated_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def add(self, findings: list[Finding], duration_s: float) -> None:
        share = duration_s / max(len(findings), 1)
        for f in findings:
            self.findings.append(f)
            status = "failed" if f.severity.value in ("warning", "error") else "passed"
            self.runs.append(CheckRun(f.check, f.category, status, share, SUMMARIES.get(f.check, f.check)))

    def skip(self, check_id: str, category: str, reason: str) -> None:
        self.runs.append(CheckRun(check_id, category, "skipped", 0.0, SUMMARIES.get(check_id, check_id), reason))

    def extend(self, report: Report) -> None:
        """Merge a `llmdoctor check` report (triage runs the quick checks too)."""
        self.findings += report.findings
        self.runs += report.checks

    def report(self, fail_on: str = "error", fingerprint: str | None = None) -> Report:
        from llmdoctor.reporting.locate import locate_report
        report = Report(model=self.model, fingerprint=fingerprint, tool_version=__version__,
                        generated_at=self.generated_at, checks=list(self.runs), findings=list(self.findings),
                        fail_on=fail_on, duration_s=time.perf_counter() - self.started,
                        device=self.device, dtype=self.dtype)
        locate_report(report, None)   # fingerprints for --known; a probe's findings are about the runtime
        return report
