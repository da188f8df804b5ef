"""llmdoctor: find what is wrong with an LLM checkpoint, its tokenizer, its runtime and its GPU.

    report = llmdoctor.check("path/to/model", select=["VOC", "tokenizer"], fail_on="warning")
    report.exit_code()
    report = llmdoctor.diff("hf-model/", "model-Q4_0.gguf", quick=True)   # `llmdoctor diff` (docs/diff.md)
"""
from __future__ import annotations

import warnings
from importlib import metadata

import reference_engine  # noqa: F401  (sets the OpenMP wait policy before anything loads torch)

# numpy is not one of our dependencies (nor torch's); torch warns on import when it is absent, which would
# put a confusing line on stderr of every run in a minimal environment
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

try:
    __version__ = metadata.version("llmdoctor")
except metadata.PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.1.0"

__all__ = ["__version__", "check", "diff", "Report", "Finding", "Severity", "CATEGORIES"]


def __getattr__(name):
    # lazy so that `import llmdoctor` (and `llmdoctor --version`) does not import torch
    if name == "check":
        from llmdoctor.run.runner import check
        return check
    if name == "diff":
        from llmdoctor.run.diff_runner import run_diff
        return run_diff
    if name in ("Report", "Finding", "Severity", "CATEGORIES", "CheckRun"):
        import findings
        return getattr(findings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
