"""The repository's own lint: `ruff check` as configured in pyproject.toml ([tool.ruff]: pycodestyle errors and
pyflakes, 120 columns), run here so the test suite (and so .ci/run) fails on an unused import, an unused variable, a
repeated dict key or a long line. ruff's E501 lets a line through when it ends in a long URL; the house rule is no
line over 120 characters at all, so the second test measures every Python file itself."""
from __future__ import annotations

import shutil
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 120


def ruff_command() -> list[str]:
    # the module form first: it is the ruff installed with the [test] extras of this interpreter
    probe = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    assert found, "ruff is not installed: pip install -e '.[test]'"
    return [found]


def test_ruff_check_is_clean():
    done = subprocess.run([*ruff_command(), "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"ruff check found problems:\n{done.stdout}{done.stderr}"


def python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        return [ROOT / name for name in listed.stdout.split()]
    skip = {".git", ".venv", "build", "dist", "__pycache__"}
    return [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]


def test_no_python_line_is_over_120_characters():
    long = []
    for path in python_files():
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if len(line) > LIMIT:
                long.append(f"{path.relative_to(ROOT)}:{number}: {len(line)} characters")
    assert not long, f"{len(long)} lines over {LIMIT} characters:\n" + "\n".join(long)


ISSUE_NUMBER = re.compile(r"\bissues? *#?\d{2,}|\bissue_?\d{2,}", re.IGNORECASE)


def test_no_issue_number_of_ours_in_code_or_test_names():
    """Code says what a thing is, not which ticket made it: no "issue 40" in a comment, no issue38_models.py.
    Public trackers' numbers (vllm#13175, llama.cpp #13322) are references, and stay."""
    found = []
    for path in python_files():
        if not path.exists() or path.name == "test_lint.py":
            continue
        if ISSUE_NUMBER.search(path.name):
            found.append(str(path.relative_to(ROOT)))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)
