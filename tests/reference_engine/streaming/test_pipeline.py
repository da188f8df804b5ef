"""The torch.distributed pipeline (gloo, CPU): 2 and 3 ranks give one process's logits and capture records,
and a rank that dies is a PipelineError on the others, not a hang."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from reference_engine.testing.factory import build_model_dir

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world: int, model: Path | str, out: Path, mode: str = "ok", timeout: float = 240) -> list[int]:
    """Start `world` ranks as separate processes; wait for all (rank 0 at most `timeout` s); exit codes. `model`
    may be several directories joined by os.pathsep: the ranks run them in turn (outputs in out/0, out/1, ...)."""
    port = free_port()
    code = ("import sys; from tests.reference_engine.streaming.pipeline_worker import run_rank; "
            "run_rank(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), str(world), str(port), str(model), str(out), mode],
                              cwd=ROOT) for r in range(world)]
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 1)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a pipeline rank hung past the timeout")
    return codes


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("pipe") / "m", "llama", seed=1, num_hidden_layers=5)


@pytest.fixture(scope="module")
def single(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    assert launch(1, model, out) == [0]
    return load_file(out / "rank0.safetensors"), json.loads((out / "rank0.json").read_text())


@pytest.mark.parametrize("world", [2, 3])
def test_pipeline_matches_one_process(world, model, single, tmp_path):
    assert launch(world, model, tmp_path) == [0] * world
    tensors, meta = single
    for rank in range(world):
        got = load_file(tmp_path / f"rank{rank}.safetensors")
        for name, want in tensors.items():
            if name in ("first", "step"):   # one-row products: gemv sums follow the buffers' alignment (memory.md)
                assert (got[name] - want).abs().max() < 1e-5, f"rank {rank}: {name} differs from one process"
            else:
                assert torch.equal(got[name], want), f"rank {rank}: {name} differs from one process"
        info = json.loads((tmp_path / f"rank{rank}.json").read_text())
        # every rank replays the other ranks' capture values in layer order: the same records as one process
        assert info["records"] == meta["records"]
        assert info["passes"] == meta["passes"]
        assert 0 < info["bytes"] < meta["bytes"]          # each rank reads only its own layers (+ embed/head)


def test_dead_rank_is_an_error_not_a_hang(model, tmp_path):
    started = time.monotonic()
    codes = launch(2, model, tmp_path, mode="die", timeout=120)
    assert codes[1] == 3
    error = (tmp_path / "error0.txt").read_text()
    assert "pipeline" in error and "\n" not in error.strip()
    assert time.monotonic() - started < 120
