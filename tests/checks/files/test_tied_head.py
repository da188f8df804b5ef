"""tie_word_embeddings against the tensors present: a flag of true over a checkpoint that stores its own, different
lm_head (WGT009: loaders ignore the trained head) and a flag of false over one with no head at all (WGT001: a random
head, vllm#53019), each on a tiny factory Llama; the checkpoints as exported, and a true flag over a stored copy of
the embedding, are quiet. Tiny models: well under a second each."""
from __future__ import annotations

import json
import shutil

from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes


def _with_flag(src, dst, tie: bool):
    shutil.copytree(src, dst)
    raw = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**raw, "tie_word_embeddings": tie}))
    return dst


def _findings(path, check_id) -> list[str]:
    report = run_checks(path, select=[check_id])
    no_crashes(report)
    return [f.message for f in report.findings if f.check == check_id and f.severity.value == "error"]


def test_tied_flag_over_a_trained_head_is_named(factory_model_dir, tmp_path):
    untied = _with_flag(factory_model_dir("llama"), tmp_path / "flag-true", tie=True)
    found = _findings(untied, "WGT009")
    assert any(m.startswith("tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight")
               for m in found), found


def test_untied_flag_without_a_head_is_named(factory_model_dir, tmp_path):
    tied = _with_flag(factory_model_dir("llama", tie_word_embeddings=True), tmp_path / "flag-false", tie=False)
    found = _findings(tied, "WGT001")
    assert any("lm_head.weight is missing but tie_word_embeddings is false" in m for m in found), found


def test_flags_that_match_the_tensors_are_quiet(factory_model_dir, tmp_path):
    assert _findings(factory_model_dir("llama"), "WGT001") == []
    tied = factory_model_dir("llama", tie_word_embeddings=True)
    assert _findings(tied, "WGT001") == [] and _findings(tied, "WGT009") == []
    copy = _with_flag(tied, tmp_path / "stored-copy", tie=True)
    tensors = load_file(copy / "model.safetensors")
    save_file({**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"].clone()},
              copy / "model.safetensors", metadata={"format": "pt"})
    assert _findings(copy, "WGT009") == []
