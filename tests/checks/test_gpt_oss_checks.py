"""`llmdoctor check` on a gpt-oss that transformers built (its own init: zero expert biases, a zero pad row),
with the factory tokenizer: the engine-backed checks run and nothing reaches error; the directory is untouched."""
from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from llmdoctor.cli import cli
from tests.conftest import snapshot_dir
from tests.reference_engine.core.tiny_models import build

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def test_check_runs_the_engine_on_a_transformers_built_gpt_oss(factory_model_dir, tmp_path):
    """~15 s on 2 cores, most of it importing transformers to build the model."""
    factory = factory_model_dir("gpt_oss")
    ids = json.loads((factory / "config.json").read_text())
    model = build(tmp_path / "model", "gpt_oss", seed=4, vocab_size=ids["vocab_size"], bos_token_id=ids["bos_token_id"],
                  eos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"])
    for name in TOKENIZER_FILES:
        shutil.copy(factory / name, model / name)
    before = snapshot_dir(model)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["check", str(model), "--quick", "--select",
                                      "config,weights,golden,selftest,MOE,competence", "--format", "json", "-o",
                                      str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    passed = {c["id"] for c in report["checks"] if c["status"] == "passed"}
    assert {"CFG010", "CFG011", "CFG012", "CFG013", "CFG014", "GLD002", "ENG001", "ENG002", "MOE003", "CMP001",
            "CMP003"} <= passed
    # norms and sinks drawn away from their initialisation, 0.3M parameters: measured, never judged
    competence = [f for f in report["findings"] if f["check"].startswith("CMP")]
    assert competence and all(f["severity"] == "info" and "too small to be held" in f["message"] for f in competence)
    assert snapshot_dir(model) == before
