"""The runner survives a check (or a resource build) that exhausts memory or stack.

The scenarios run in a subprocess under an address-space limit (768 MB above what it has mapped after its
imports), so the MemoryError is a real one: the check holds hundreds of MB when it fails, and the crash report must
be built without the memory it holds. The
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

ROOT = Path(__file__).resolve().parents[3]

# registers three fake checks, then runs llmdoctor.check (or the CLI) on a config-only directory under RLIMIT_AS
SCRIPT = textwrap.dedent('''
    import json, resource, sys
    model_dir = sys.argv[2]
    import torch, llmdoctor, checks
    from checks.catalogue.registry import Problem, check
    from checks.catalogue.inputs import CheckInputs
    checks.load_all()

    def exhaust():
        """Take every byte the limit allows, big blocks then small ones, and fail holding them all."""
        held = []
        for size in (64 << 20, 1 << 20, 4096):
            try:
                while True:
                    held.append(bytearray(size))   # touched memory, released only with the frame
            except MemoryError:
                pass
        held.append(bytearray(64 << 20))           # and fail holding them all

    @check("ENV981", category="environment", severity="error")
    def hogs_memory(ctx):
        """Holds ever more memory until none is left."""
        exhaust()

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
        exhaust()
    import reference_engine.tokenizer.tokenizer as tk
    tk.Tokenizer.from_pretrained = staticmethod(hog_build)

    import os, reports, llmdoctor.cli      # imported before the limit, so the hogs fill only the headroom
    mapped = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = mapped + int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    report = llmdoctor.check(model_dir, select="ENV98", use_config=False)
    print(json.dumps({r.id: [r.status, r.reason] for r in report.checks}))
    print(json.dumps({f.check: f.message for f in report.findings}))
    sys.stdout.flush()
    from llmdoctor.cli import cli     # then the same through the CLI, JSON on stdout after a marker line
    print("--- cli")
    cli(["check", model_dir, "--select", "ENV98", "--format", "json", "--no-config"], prog_name="llmdoctor")
''')


@pytest.fixture(scope="module")
def exhausted(tmp_path_factory) -> tuple[subprocess.CompletedProcess, str, str]:
    """One subprocess (torch imports once): the API run's two JSON lines, then the CLI's JSON report."""
    model_dir = tmp_path_factory.mktemp("exhaust")
    (model_dir / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    headroom = 768 << 20     # above what python + torch + the checks have mapped: what the hogs fill
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, "both", str(model_dir), str(headroom)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    api, _, cli = done.stdout.partition("--- cli\n")
    return done, api, cli


def test_memory_and_recursion_exhaustion_are_crashes_not_escapes(exhausted):
    done, api, _ = exhausted
    assert api.count("\n") >= 2, done.stderr[-3000:]
    runs, messages = (json.loads(line) for line in api.strip().splitlines()[-2:])
    assert runs["ENV981"][0] == "crashed" and runs["ENV981"][1].startswith("MemoryError")
    assert runs["ENV982"][0] == "crashed" and runs["ENV982"][1].startswith("RecursionError")
    assert runs["ENV983"][0] == "skipped" and runs["ENV983"][1].startswith("needs tokenizer: MemoryError")
    assert runs["ENV984"] == ["failed", ""]                  # the run went on after three exhaustions
    assert messages["ENV981"].startswith("check crashed: MemoryError")
    assert messages["ENV984"] == "still here"


def test_cli_reports_memory_exhaustion_in_json(exhausted):
    done, _, cli = exhausted
    assert done.returncode == 1, done.stderr[-3000:]          # findings at error level: exit 1, not a traceback
    assert "Traceback" not in done.stderr
    report = json.loads(cli)
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert status == {"ENV981": "crashed", "ENV982": "crashed", "ENV983": "skipped", "ENV984": "failed"}
    crash = next(f for f in report["findings"] if f["check"] == "ENV981")
    assert crash["evidence"]["exception"] == "MemoryError"
    assert "ENV981" in crash["message"] or crash["message"].startswith("check crashed: MemoryError")


@pytest.mark.parametrize("error, words", [(MemoryError, "ran out of memory (MemoryError)"),
                                          (RecursionError("too deep"), "ran out of stack (RecursionError: too deep)")])
def test_exhaustion_outside_the_checks_is_one_line_exit_2(tmp_path, monkeypatch, error, words):
    """Rendering a report (or anything else the CLI does around the checks) may run out too: one line, exit 2."""
    from click.testing import CliRunner
    import reports
    from llmdoctor.cli import cli
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))

    def render(*args, **kwargs):
        raise error
    monkeypatch.setattr(reports, "render", render)
    result = CliRunner().invoke(cli, ["check", str(tmp_path), "--select", "CFG001", "--no-config"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == f"llmdoctor: error: {words}"
