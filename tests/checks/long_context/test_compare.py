"""GGF020 (a GGUF's long-context metadata against the config.json beside it) and DIF060 (long-context settings
changed between two models), on SmolLM2's Q4_1 GGUF and Gemma 3 270M's config. Metadata and config only: about
a second each."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from llmdoctor.run.diff_runner import run_diff
from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes
from tests.checks.long_context.test_declared import GEMMA3, config_dir


def gguf_beside(gguf: Path, config: Path, dst: Path, edit=None) -> Path:
    dst.mkdir(parents=True)
    try:
        os.link(gguf, dst / gguf.name)
    except OSError:
        shutil.copy(gguf, dst / gguf.name)
    raw = json.loads((config / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(edit(raw) if edit else raw))
    return dst / gguf.name


def warnings(report, check_id) -> list[str]:
    no_crashes(report)
    return [f.message for f in report.findings if f.check == check_id and f.severity.value == "warning"]


@pytest.mark.assets
def test_gguf_metadata_against_its_config(smollm2_gguf, smollm2_dir, tmp_path):
    same = gguf_beside(smollm2_gguf, smollm2_dir, tmp_path / "same")
    assert warnings(run_checks(same, select=["GGF020"]), "GGF020") == []
    other = gguf_beside(smollm2_gguf, smollm2_dir, tmp_path / "other", lambda raw: {
        **raw, "max_position_embeddings": 2048,
        "rope_parameters": {**raw["rope_parameters"], "rope_theta": 10000.0}})
    found = warnings(run_checks(other, select=["GGF020"]), "GGF020")
    assert any(m.startswith("rope_theta") for m in found) and any(m.startswith("max_position") for m in found), found


@pytest.mark.assets
@pytest.mark.parametrize("name", ["window_every_layer", "rope_bases_swapped"])
def test_diff_names_the_changed_context_setting(name, gemma3_270m_dir, tmp_path):
    ref = config_dir(gemma3_270m_dir, tmp_path / "ref")
    cand = config_dir(gemma3_270m_dir, tmp_path / "cand", GEMMA3[name][1])
    found = warnings(run_diff(ref, cand, select=["DIF060"]), "DIF060")
    field = {"window_every_layer": "layer_types", "rope_bases_swapped": "local_rope_theta"}[name]
    assert any(m.startswith(field) for m in found), found
    assert warnings(run_diff(ref, config_dir(gemma3_270m_dir, tmp_path / "same"), select=["DIF060"]),
                    "DIF060") == []
