"""`llmdoctor probe endpoint` and `triage --endpoint` on the command line, without a server: a dead port is
EPT001 (exit 1), an unset API key variable or a bad model is one line and exit 2."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llmdoctor.cli import cli
from tests.endpoint_assets import free_port

pytestmark = pytest.mark.assets


def test_dead_server_is_ept001(smollm2_dir, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["probe", "endpoint", f"http://127.0.0.1:{free_port()}/v1", "--model",
                                      str(smollm2_dir), "--timeout", "2", "--format", "json", "-o", str(out)])
    assert result.exit_code == 1, result.output
    data = json.loads(out.read_text())
    assert [f["check"] for f in data["findings"]] == ["EPT001"]
    assert {c["status"] for c in data["checks"] if c["id"] != "EPT001"} == {"skipped"}


def test_unset_key_variable_is_one_line(smollm2_dir, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    result = CliRunner().invoke(cli, ["probe", "endpoint", "http://127.0.0.1:9", "--model", str(smollm2_dir),
                                      "--api-key-env", "NO_SUCH_KEY_VAR"])
    assert result.exit_code == 2 and "NO_SUCH_KEY_VAR is not set" in result.output


def test_bad_model_is_one_line(tmp_path):
    (tmp_path / "m").mkdir()
    result = CliRunner().invoke(cli, ["probe", "endpoint", "http://127.0.0.1:9", "--model", str(tmp_path / "m")])
    assert result.exit_code == 2 and "Traceback" not in result.output and "llmdoctor: error:" in result.output


def test_endpoint_checks_are_not_run_by_check(smollm2_dir):
    import llmdoctor
    report = llmdoctor.check(smollm2_dir, select=["EPT", "CFG"])
    assert report.checks and not [r for r in report.checks if r.id.startswith("EPT")]


def test_triage_with_dead_endpoint_still_writes_the_bundle(smollm2_dir, tmp_path):
    result = CliRunner().invoke(cli, ["triage", str(smollm2_dir), "-o", str(tmp_path / "b"), "--no-checks",
                                      "--kv-requests", "50", "--endpoint", f"http://127.0.0.1:{free_port()}",
                                      "--timeout", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "b" / "report.json").read_text())
    assert [f for f in data["findings"] if f["check"] == "EPT001" and f["severity"] == "error"]
