"""A report exercising every renderer path: all statuses and severities, plots, evidence tables, a crash, hostile
text."""
from __future__ import annotations

import pytest

from findings import CheckRun, Finding, Report

ACTIVATION_PLOT = {"kind": "line", "title": "max |hidden state| per layer", "x": list(range(8)),
                   "series": {"max": [3.0, 12.0, 80.0, 400.0, 2e3, 9e3, 4.1e4, 7.2e4],
                              "mean": [0.5, 0.8, 1.1, 1.5, 2.0, "nan", 2.6, None]},
                   "x_label": "layer", "y_label": "|h|", "y_scale": "log", "hlines": {"float16 max": 65504}}
BANDWIDTH_PLOT = {"kind": "bar", "title": "copy bandwidth", "x": ["H2D", "D2H", "D2D"],
                  "series": {"measured GB/s": [48.1, 50.3, 4310.0]}, "x_label": "copy", "y_label": "GB/s",
                  "hlines": {"peak": 4800}}


# evidence tables as the engine checks write them: ACT001's per-layer statistics (with its "columns" order) and
# NUM003's numerics per dtype (a nested dict in a cell)
LAYER_COLUMNS = ["layer", "module", "min", "max", "std", "absmax", "nonfinite"]
LAYER_TABLE = [{"absmax": 3.0 * 1.6 ** i, "layer": i // 2, "max": 2.9 * 1.6 ** i, "min": -3.0 * 1.6 ** i,
                "module": ("attn", "mlp")[i % 2], "nonfinite": 0, "std": 0.01 * 1.5 ** i} for i in range(50)]
DTYPE_TABLE = [{"dtype": "float32", "mean_kl": 0.0, "peak": 72000.0, "peak_at": {"layer": 7, "module": "mlp"},
                "top1_agreement": 1.0},
               {"dtype": "bfloat16", "mean_kl": 0.00123, "peak": 71936.0, "peak_at": {"layer": 7, "module": "mlp"},
                "top1_agreement": 0.9771},
               {"dtype": "float16", "mean_kl": None, "peak": 65504.0, "peak_at": None, "top1_agreement": 0.0}]


def make_report(fail_on: str = "error") -> Report:
    runs = [CheckRun("FIL001", "files", "passed", 0.002, "Files present."),
            CheckRun("CFG002", "config", "failed", 0.001, "Attention geometry fits."),
            CheckRun("VOC002", "vocab", "failed", 0.05, "Token ids fit the embedding."),
            CheckRun("ACT001", "activations", "failed", 1.25, "Activations stay in float16 range."),
            CheckRun("GPU003", "gpu", "skipped", 0.0, "Copy bandwidth near peak.", "needs gpu: no CUDA device"),
            CheckRun("GPU004", "gpu", "skipped", 0.0, "Clocks not throttled.", "needs gpu: no CUDA device"),
            CheckRun("TOK005", "tokenizer", "crashed", 0.01, "Round trip.", "KeyError: 'merges'"),
            CheckRun("EMB001", "embeddings", "passed", 0.3, "Special rows trained."),
            CheckRun("NUM003", "numerics", "passed", 2.1, "Numerics per dtype.")]
    findings = [
        Finding("CFG002", "config", "error", "num_key_value_heads 3 does not divide num_attention_heads 8",
                {"num_attention_heads": 8, "num_key_value_heads": 3}, "Set num_key_value_heads to a divisor."),
        Finding("VOC002", "vocab", "warning", "tokenizer <script>alert(1)</script> | pipes | 'quotes' & ünïcode",
                {"tokenizer_len": 32004, "embedding_rows": 32000}, "Resize the embedding <b>now</b>."),
        Finding("ACT001", "activations", "warning", "layer 7 max |h| 72000 exceeds float16 max",
                {"layer": 7, "max_abs": 72000.0, "table": LAYER_TABLE, "columns": LAYER_COLUMNS}, "Run in bfloat16.",
                data={"plot": ACTIVATION_PLOT}),
        Finding("ACT001", "activations", "info", "bandwidth and a broken plot", {},
                "", data={"plots": [BANDWIDTH_PLOT, {"kind": "pie", "x": [1], "series": {"a": [1]}}]}),
        Finding("NUM003", "numerics", "info", "recommended dtype: bfloat16 (declared: float32)",
                {"recommended": "bfloat16", "declared": "float32", "table": DTYPE_TABLE}),
        Finding("TOK005", "tokenizer", "error", "check crashed: KeyError: 'merges'",
                {"exception": "KeyError",
                 "traceback": "Traceback (most recent call last):\n  File ...\nKeyError: 'merges'"},
                "Report it."),
    ]
    return Report(model="/models/demo <x>", fingerprint="sha256:" + "ab" * 32, tool_version="0.1.0",
                  generated_at="2026-11-29T12:00:00+00:00", checks=runs, findings=findings, fail_on=fail_on,
                  duration_s=1.62)


@pytest.fixture
def sample_report() -> Report:
    return make_report()
