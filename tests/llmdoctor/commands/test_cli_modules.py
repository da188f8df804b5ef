"""Every CLI module imports alone, in a fresh interpreter: no module relies on another having been imported
first (an import circle between two command modules only shows when the second one is imported first)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMANDS = ROOT / "llmdoctor" / "commands"
CLI_MODULES = sorted(["llmdoctor.cli", *(f"llmdoctor.commands.{p.stem}" for p in COMMANDS.glob("*.py")
                                        if p.stem != "__init__")])


def test_every_command_module_is_found():
    expected = {"llmdoctor.cli", "llmdoctor.commands.options", "llmdoctor.commands.endpoint",
                "llmdoctor.commands.probe"}
    assert expected <= set(CLI_MODULES)


@pytest.mark.parametrize("module", CLI_MODULES)
def test_cli_module_imports_alone(module):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"import {module} failed alone:\n{done.stderr[-2000:]}"


def test_every_command_is_registered_explicitly():
    """cli.py adds each command module's commands itself; importing a module registers nothing."""
    from llmdoctor.cli import cli
    assert {"check", "checks", "explain", "generate", "fix", "probe", "triage", "baseline", "diff"} <= set(cli.commands)
    assert "endpoint" in cli.commands["probe"].commands


def test_probe_endpoint_request_budget_default_is_the_probes_own():
    """The CLI spells the default out (importing the client would load httpx at every start): the same number."""
    from llmdoctor.commands.endpoint import probe_endpoint
    from probes.endpoint.client import MAX_REQUESTS
    [option] = [p for p in probe_endpoint.params if p.name == "max_requests"]
    assert option.default == MAX_REQUESTS
