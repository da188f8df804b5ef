"""The runner survives a check (or a resource build) that exhausts memory or stack (issue 18).

Each scenario runs in a subprocess under an address-space limit, so the MemoryError is a real one: the check
holds hundreds of MB when it fails, and the crash report must be built without the memory it holds. The
report names the check as crashed with a short reason, later checks still run, and nothing escapes
`llmdoctor.check` or the CLI.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# registers three fake checks, then runs llmdoctor.check (or the CLI) on a config-only directory under RLIMIT_AS
SCRIPT = textwrap.dedent('''
    import json, resource, sys
    mode, model_dir = sys.argv[1], sys.argv[2]
    import torch, llmdoctor, checks
    from checks.registry import Problem, check
    from checks.context import CheckContext
    checks.load_all()

    @check("ENV981", category="environment", severity="error")
    def hogs_memory(ctx):
        """Holds ever more memory until none is left."""
        held = []
        while True:
            held.append(bytearray(64 << 20))   # 64 MiB, touched: real memory, released only with the frame

    @check("ENV982", category="environment", severity="error")
    def recurses(ctx):
        """Recurses without end."""
        def down(n):
            return down(n + 1) + 1
        return down(0)

    @check("ENV983", category="environment", severity="error", needs=("tokenizer",))
    def needs_tokenizer(ctx):
        """Its resource build runs out of memory."""

    @check("ENV984", category="environment", severity="warning")
    def still_runs(ctx):
        """Runs after the others."""
        yield Problem("still here", evidence={"block": list(range(1000))})

    def hog_build(model_dir):
        held = []
        while True:
            held.append(bytearray(64 << 20))
    import reference_engine.tokenizer.tokenizer as tk
    tk.Tokenizer.from_pretrained = staticmethod(hog_build)

    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[3]), int(sys.argv[3])))
    if mode == "api":
        report = llmdoctor.check(model_dir, select="ENV98", use_config=False)
        print(json.dumps({r.id: [r.status, r.reason] for r in report.checks}))
        print(json.dumps({f.check: f.message for f in report.findings}))
    else:
        from llmdoctor.cli import cli
        cli(["check", model_dir, "--select", "ENV98", "--format", "json", "--no-config"], prog_name="llmdoctor")
''')


def run_script(mode: str, model_dir: Path) -> subprocess.CompletedProcess:
    # room for python + torch + the checks (~0.8 GB mapped), and ~2 GB for the hogs to fill
    limit = 3 << 30
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", SCRIPT, mode, str(model_dir), str(limit)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return tmp_path


def test_memory_and_recursion_exhaustion_are_crashes_not_escapes(model_dir):
    done = run_script("api", model_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    runs, messages = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert runs["ENV981"][0] == "crashed" and runs["ENV981"][1].startswith("MemoryError")
    assert runs["ENV982"][0] == "crashed" and runs["ENV982"][1].startswith("RecursionError")
    assert runs["ENV983"][0] == "skipped" and runs["ENV983"][1].startswith("needs tokenizer: MemoryError")
    assert runs["ENV984"] == ["failed", ""]                  # the run went on after three exhaustions
    assert messages["ENV981"].startswith("check crashed: MemoryError")
    assert messages["ENV984"] == "still here"


def test_cli_reports_memory_exhaustion_in_json(model_dir):
    done = run_script("cli", model_dir)
    assert done.returncode == 1, done.stderr[-3000:]          # findings at error level, not a traceback (2/1)
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert status == {"ENV981": "crashed", "ENV982": "crashed", "ENV983": "skipped", "ENV984": "failed"}
    crash = next(f for f in report["findings"] if f["check"] == "ENV981")
    assert crash["evidence"]["exception"] == "MemoryError"
    assert "hogs_memory" in crash["evidence"]["traceback"]    # where it happened, though the frames were freed
