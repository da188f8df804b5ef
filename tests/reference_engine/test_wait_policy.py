"""OpenMP waiters sleep in every process that runs the engine (reference_engine/__init__.py): `llmdoctor` and
`reference_engine` set OMP_WAIT_POLICY=PASSIVE before torch loads, a value the user set is kept. (Spinning
waiters made a streamed Qwen3-Next prefill pass 19x slower on a busy 2-core machine: benchmarks/streaming_hybrid.py.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# `llmdoctor` is the first import of the CLI (`llmdoctor.cli`, `python -m llmdoctor`) and of the API
PROBE = "import {module}, os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"


@pytest.mark.parametrize("module, given, wanted", [("llmdoctor", None, "PASSIVE"),
                                                   ("reference_engine", None, "PASSIVE"),
                                                   ("llmdoctor", "ACTIVE", "ACTIVE")])
def test_wait_policy_is_set_before_torch_loads(module, given, wanted):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    done = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [wanted, "False"]          # set while libgomp can still read it
