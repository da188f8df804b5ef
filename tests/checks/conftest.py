"""Fixtures for the static-check tests: healthy base models (built once per session), a broken-copy maker, a
static-check runner (the fault zoo's matrix: tests/zoo_matrix.py)."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pytest

import checks
from checks.catalogue.registry import REGISTRY
from llmdoctor.run.runner import run_checks
from tests.checks.zoo import BASES

STATIC_CATEGORIES = ["files", "config", "weights", "vocab", "embeddings", "tokenizer"]


def run_static(model_dir: Path):
    """Report of the static checks (no engine, no GPU) on one directory."""
    return run_checks(model_dir, select=STATIC_CATEGORIES)


@pytest.fixture(scope="session")
def base_dir(factory_model_dir) -> Callable[[str], Path]:
    """base_dir("sharded") -> the healthy directory the zoo's faults start from (read-only)."""
    def get(name: str) -> Path:
        preset, overrides = BASES[name]
        return factory_model_dir(preset, **overrides)
    return get


@pytest.fixture
def broken_copy(tmp_path, base_dir) -> Callable[[str, Callable[[Path], None]], Path]:
    """broken_copy(base, apply) -> a fresh copy of the base with `apply` run on it."""
    def make(base: str, apply: Callable[[Path], None]) -> Path:
        target = tmp_path / f"model{len(list(tmp_path.glob('model*')))}"
        shutil.copytree(base_dir(base), target)
        apply(target)
        return target
    return make


def fired(report) -> list[str]:
    """'ID:severity' of every finding, for comparing against a fault's expectation."""
    return sorted({f"{f.check}:{f.severity.value}" for f in report.findings})


def no_crashes(report) -> None:
    crashed = [(c.id, c.reason) for c in report.checks if c.status == "crashed"]
    assert not crashed, crashed


def competence_standing(report) -> str:
    """How the competence family (CMP) ended on a tiny model's check run: "untrained" (weights at their
    initialisation) or "too small" (trained or randomised, under the 50M parameters the bounds hold for). Either
    way measured, not judged: CMP001 and CMP003 ran, every CMP finding is info, never a warning or an error.
    CMP002 runs, or is skipped because a small test vocabulary has no copy sequence to draw."""
    status = {c.id: (c.status, c.reason) for c in report.checks if c.id.startswith("CMP")}
    assert status["CMP001"][0] == status["CMP003"][0] == "passed", status
    assert status["CMP002"][0] == "passed" or "too few ordinary word pieces" in status["CMP002"][1], status
    found = [f for f in report.findings if f.check.startswith("CMP")]
    assert found and all(f.severity.value == "info" for f in found), [(f.check, f.message) for f in found]
    kinds = {"untrained" if f.message.startswith("untrained") else
             "too small" if "too small to be held" in f.message else f.message for f in found}
    assert len(kinds) == 1, kinds
    return kinds.pop()


def problems(report) -> list[str]:
    """Every warning or error, as one readable line each (a healthy model has none)."""
    return [f"{f.check} {f.severity.value}: {f.message}" for f in report.findings if f.severity.value != "info"]


@pytest.fixture
def sandbox():
    """The real catalogue loaded; anything a test registers is removed afterwards."""
    checks.load_all()
    saved = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(saved)
