"""Fuzz: a few hundred hostile model directories, seeded, checked in-process under a 3 GiB
address-space limit. No exception escapes llmdoctor.check or the report renderers, no check crashes, and no
size a file declares is taken at its word: a billion layers is a CFG finding, a thousand layers on a
two-layer checkpoint a WGT finding, and the engine refuses impossible sizes in one line before allocating.

The cases are built by tests/llmdoctor/run/fuzz_cases.py (replay one with `python -m tests.llmdoctor.run.fuzz_cases
OUT.json --only N`). The limit makes a regression fail fast with MemoryError instead of paging the machine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SEED, CASES, ENGINE_CASES = 18, 240, 6


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("fuzz18")
    out = work / "records.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.llmdoctor.run.fuzz_cases", str(out), "--seed", str(SEED),
                           "--cases", str(CASES), "--engine", str(ENGINE_CASES), "--rlimit-gib", "3",
                           "--workdir", str(work)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"fuzz worker died (rc {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(out.read_text())


def describe(records: list[dict]) -> str:
    return "\n".join(f"case {r['case']} {r['mutations']}: escaped={r['escaped']} crashed={r['crashed'][:3]}"
                     for r in records[:15])


def test_no_exception_escapes_and_no_check_crashes(fuzz):
    records = fuzz["records"]
    assert len(records) == CASES + ENGINE_CASES
    bad = [r for r in records if r["escaped"] or r["crashed"]]
    assert not bad, f"{len(bad)} of {len(records)} hostile directories broke the promise:\n{describe(bad)}"
    # the worker stayed far below its 3 GiB address space: nothing was sized from a declared number
    assert fuzz["peak_rss_kib"] < 1.5 * 2**20


def test_the_cases_reach_the_size_paths(fuzz):
    """The seeded mutations cover what the issue lists (so a generator change cannot hollow the test out)."""
    text = " ".join(m for r in fuzz["records"] for m in r["mutations"])
    for needle in ("num_hidden_layers=1000000000", "vocab_size=", "max_position_embeddings=", "head_dim=",
                   "intermediate_size=", "experts=", "tokenizer vocab", "added_tokens", "merges",
                   "safetensors", "index kind", "=-1", "=0", "=1.5", "='32'"):
        assert needle in text, needle


def test_declared_layers_are_findings_from_the_names_present(fuzz):
    by_claim: dict[str, set] = {}
    for r in fuzz["records"]:
        if r["select"] == "static" and len(r["mutations"]) == 1 and "num_hidden_layers=" in r["mutations"][0]:
            by_claim.setdefault(r["mutations"][0].split("=")[1], set()).update(r["findings"])
    assert "CFG001" in by_claim["1000000000"]           # past the sane bound: config.json cannot be used
    assert "WGT001" in by_claim["1000"] and "CFG001" not in by_claim["1000"]   # within it: layers missing


def test_engine_refuses_impossible_sizes_in_one_line(fuzz):
    engine = [r for r in fuzz["records"] if r["select"] == "engine"]
    assert len(engine) == ENGINE_CASES
    # 100M positions on a tiny model is not impossible: the RoPE table's rows are built as positions reach them
    # (reference_engine/core/rope.py), so its engine checks run, and nothing crashes
    long = [r for r in engine if r["mutations"] == ["config max_position_embeddings=100000000"]]
    assert len(long) == 1 and not long[0]["crashed"] and not long[0].get("engine") and not long[0]["refused"], long
    for r in engine:
        if r in long:
            continue
        reason = r.get("engine") or r["refused"]   # engine checks skipped, or the whole run refused by the plan
        assert reason and "\n" not in reason, r
        assert not any(word in reason for word in ("MemoryError", "RuntimeError", "Traceback", "can't allocate")), r
    reasons = " | ".join(r.get("engine") or r["refused"] for r in engine if r not in long)
    assert "config declares num_hidden_layers = 1000 but the weights hold tensors only for layers 0..1" in reasons
    assert "'max_position_embeddings' is 1000000000000, above the sane limit" in reasons
