"""`python3 -m llmdoctor check DIR` on a tiny DeepSeek-V3 built by transformers (its own weights, the factory's
tokenizer): the engine-backed checks run on MLA and no finding is an error. (~25 s: the quick check of a model.)"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.reference_engine.core.tiny_models import checkable

ROOT = Path(__file__).resolve().parents[3]


def test_quick_check_of_a_transformers_built_deepseek_v3_has_no_error(tmp_path):
    model = checkable(tmp_path / "dsv3", "dsv3_qlora_yarn_groups")
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "llmdoctor", "check", str(model), "--quick", "--format", "json",
                           "-o", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [f["check"] for f in report["findings"] if f["severity"] == "error"] == []
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert "crashed" not in status.values()
    for check in ("CFG020", "CFG021", "GLD002", "ACT001", "NUM001", "GEN001", "MOE003", "MOE006", "ENG001"):
        assert status[check] == "passed", (check, status[check])
