"""The installed `llmdoctor` console script, run as a real process: what a user or CI job sees."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from llmdoctor.cli import DEMO_MODEL

STATIC = "files,config,weights,vocab,embeddings,tokenizer"  # no engine: the demo test runs the whole catalogue


@pytest.fixture(scope="module")
def script() -> str:
    path = shutil.which("llmdoctor")
    assert path, "the llmdoctor console script is not installed: run `pip install -e .`"
    return path


def run(script, *args, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return subprocess.run([script, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=env)


def test_nonexistent_path_is_exit_2_with_exactly_one_stderr_line(script, tmp_path):
    done = run(script, "check", "/nonexistent", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["llmdoctor: error: /nonexistent: no such directory"]


def test_json_report_and_exit_code_of_a_real_run(script, factory_model_dir, tmp_path):
    model = factory_model_dir("llama")
    done = run(script, "check", model, "--format", "json", "--fail-on", "warning", "--select", STATIC, cwd=tmp_path)
    report = json.loads(done.stdout)
    assert done.returncode == report["exit_code"] == (1 if report["summary"]["warning"] else 0)
    assert report["model"] == str(model) and report["checks"] and done.stderr == ""


def test_demo_prints_a_clean_table_and_exits_0(script, tmp_path):
    assert DEMO_MODEL.is_dir(), f"{DEMO_MODEL} is missing: the demo model must ship with the package"
    done = run(script, "check", "--demo", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    summary = next(line for line in reversed(lines) if " checks in " in line)
    assert lines[-1] == "PASS: nothing at or above error" and "0 crashed; 0 errors" in summary
    assert "\x1b[" not in done.stdout and done.stderr == ""  # not a terminal: no colour, no progress bar


def test_runs_without_numpy(tmp_path):
    """numpy is no runtime dependency (torch does not require it): the whole demo run must not touch it."""
    blocker = "import sys; sys.modules['numpy'] = None\nfrom llmdoctor.cli import cli\ncli(prog_name='llmdoctor')"
    done = subprocess.run([sys.executable, "-c", blocker, "check", "--demo", "--quick", "--fail-on", "error"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 crashed" in done.stdout and done.stderr == ""
