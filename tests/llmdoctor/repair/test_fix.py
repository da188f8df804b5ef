"""`llmdoctor fix` writes a repaired copy: the source stays byte-for-byte and mtime identical, the static checks on
the copy find nothing but the rows fix re-initialised (EMB005: mean-initialised, not trained yet), unchanged
tensors are bit-identical (read back with the safetensors library as the oracle), fix says what it changed and
that those rows still need training, and bad output directories are refused before anything is written."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from llmdoctor.cli import cli
from llmdoctor.repair.repaired_copy import FixError, expected_after_fix, fix_model
from llmdoctor.run.runner import run_checks
from reference_engine.files.safetensors_io import validate_file
from tests.checks import zoo

STATIC = ["files", "config", "weights", "vocab", "embeddings", "tokenizer"]


def broken(tmp_path: Path, base: Path, *faults) -> Path:
    d = tmp_path / "broken"
    shutil.copytree(base, d)
    for fault in faults:
        fault(d)
    return d


def problems(model_dir: Path, reinitialised: dict | None = None) -> list[str]:
    """Warnings and errors, less the EMB005 findings on exactly the rows a fix re-initialised."""
    report = run_checks(model_dir, select=STATIC)
    return [f"{f.check} {f.severity.value}: {f.message}" for f in report.findings if f.severity.value != "info"
            and not expected_after_fix(f, reinitialised or {})]


def mean_initialised(model_dir: Path) -> dict[str, list[int]]:
    """EMB005's report on a directory: tensor -> ids of mean-initialised rows."""
    report = run_checks(model_dir, select=["EMB005"])
    return {f.evidence["tensor"]: f.evidence["ids"] for f in report.findings}


def all_tensors(d: Path) -> dict[str, torch.Tensor]:
    out = {}
    for file in sorted(d.glob("*.safetensors")):
        assert validate_file(file) == []
        out.update(load_file(str(file)))
    return out


def test_fix_round_trips_vocab_and_untrained_rows(tmp_path, factory_model_dir, dir_snapshot):
    src = broken(tmp_path, factory_model_dir("llama"), zoo.add_tokens_beyond,
                 zoo.special_rows(lambda r, k: torch.zeros_like(r)))
    assert {p.split(":")[0] for p in problems(src)} >= {"VOC002 error", "EMB001 warning"}
    before = dir_snapshot(src)
    result = fix_model(src, tmp_path / "fixed", vocab=True, untrained_embeddings=True)
    assert dir_snapshot(src) == before
    assert problems(result.out_dir, result.reinitialised) == []
    old, new = all_tensors(src), all_tensors(result.out_dir)
    assert json.loads((result.out_dir / "config.json").read_text())["vocab_size"] == 516
    for name in old:
        if name not in (zoo.EMBED, zoo.LM_HEAD):
            assert torch.equal(old[name], new[name]), name
    im_start, im_end = zoo.special_id(src, zoo.IM_START), zoo.special_id(src, zoo.IM_END)
    for name in (zoo.EMBED, zoo.LM_HEAD):
        assert new[name].shape == (516, 64)
        trained = [i for i in range(512) if i not in (im_start, im_end)]
        assert torch.equal(new[name][trained], old[name][trained])
        mean = old[name][trained].double().mean(dim=0).float()
        for i in (im_start, im_end, 512, 515):
            torch.testing.assert_close(new[name][i], mean)


def test_sharded_fix_rewrites_only_the_shards_it_changes(tmp_path, factory_model_dir):
    src = broken(tmp_path, factory_model_dir("llama", shards=3), zoo.add_tokens_beyond)
    result = fix_model(src, tmp_path / "fixed", vocab=True)
    index = json.loads((result.out_dir / zoo.INDEX).read_text())
    size = sum(t.numel() * t.element_size() for t in all_tensors(result.out_dir).values())
    assert index["metadata"]["total_size"] == size
    changed = {index["weight_map"][zoo.EMBED], index["weight_map"][zoo.LM_HEAD]}
    assert set(result.rewritten) == changed | {"config.json", zoo.INDEX}
    untouched = set(index["weight_map"].values()) - changed
    assert untouched
    for name in untouched:
        assert (src / name).read_bytes() == (result.out_dir / name).read_bytes()
    assert problems(result.out_dir) == []


def test_tied_bf16_model_keeps_dtype_and_ties(tmp_path, factory_model_dir):
    base = factory_model_dir("qwen3", tie_word_embeddings=True, torch_dtype="bfloat16")
    src = broken(tmp_path, base, zoo.add_tokens_beyond,
                 zoo.special_rows(lambda r, k: r * 1e-7, names=(zoo.EMBED,)))
    result = fix_model(src, tmp_path / "fixed", vocab=True, untrained_embeddings=True)
    tensors = all_tensors(result.out_dir)
    assert zoo.LM_HEAD not in tensors
    assert tensors[zoo.EMBED].dtype == torch.bfloat16 and tensors[zoo.EMBED].shape[0] == 516
    assert problems(result.out_dir, result.reinitialised) == []


def test_nothing_to_fix_writes_an_identical_copy(tmp_path, factory_model_dir):
    src = factory_model_dir("mistral")
    result = fix_model(src, tmp_path / "fixed", vocab=True, untrained_embeddings=True)
    assert result.actions == [] and result.rewritten == []
    for item in src.iterdir():
        assert (result.out_dir / item.name).read_bytes() == item.read_bytes()


@pytest.mark.parametrize("where", ["same", "inside", "non_empty", "file"])
def test_refuses_bad_output_dirs(where, tmp_path, factory_model_dir, dir_snapshot):
    src = broken(tmp_path, factory_model_dir("llama"), zoo.add_tokens_beyond)
    target = {"same": src, "inside": src / "fixed", "non_empty": tmp_path / "full", "file": tmp_path / "f"}[where]
    if where == "non_empty":
        target.mkdir()
        (target / "keep.txt").write_text("x")
    if where == "file":
        target.write_text("x")
    before = dir_snapshot(src)
    with pytest.raises(FixError):
        fix_model(src, target, vocab=True)
    assert dir_snapshot(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["broken"] + (["full"] if where == "non_empty" else [])
                                                                 + (["f"] if where == "file" else []))


def test_cli_fix(tmp_path, factory_model_dir, dir_snapshot):
    src = broken(tmp_path, factory_model_dir("llama"), zoo.special_rows(lambda r, k: r * 0.01))
    before = dir_snapshot(src)
    runner = CliRunner()
    done = runner.invoke(cli, ["fix", str(src), "-o", str(tmp_path / "out"), "--untrained-embeddings"])
    assert done.exit_code == 0, done.output
    assert "changed: model.embed_tokens.weight: 2 untrained" in done.output and "still need training" in done.output
    assert "re-initialised rows (2 in model.embed_tokens.weight, 2 in lm_head.weight)" in done.output
    assert "needs training: EMB005 warning: model.embed_tokens.weight: 2 special-token row(s) are " \
           "mean-initialised" in done.output
    assert "no trained meaning yet" in done.output and "clean" not in done.output
    assert dir_snapshot(src) == before
    same = runner.invoke(cli, ["fix", str(src), "-o", str(src), "--vocab"])
    assert same.exit_code == 2 and "must not be the model directory" in same.output
    assert "Traceback" not in same.output
    nothing = runner.invoke(cli, ["fix", str(src), "-o", str(tmp_path / "x")])
    assert nothing.exit_code == 2 and "--vocab" in nothing.output


def test_fixed_rows_are_reported_as_mean_initialised_not_as_healthy(tmp_path, factory_model_dir):
    """The rows fix writes are exactly what EMB005 lists (with ids); EMB001-003 no longer fire on them; a second
    fix finds nothing left to do: mean rows are a start for training, not a fault to repair again."""
    src = broken(tmp_path, factory_model_dir("llama"), zoo.special_rows(lambda r, k: torch.zeros_like(r)))
    assert mean_initialised(src) == {}
    result = fix_model(src, tmp_path / "fixed", untrained_embeddings=True)
    im_start, im_end = zoo.special_id(src, zoo.IM_START), zoo.special_id(src, zoo.IM_END)
    assert result.reinitialised == {zoo.EMBED: [im_start, im_end], zoo.LM_HEAD: [im_start, im_end]}
    assert mean_initialised(result.out_dir) == result.reinitialised
    report = run_checks(result.out_dir, select=["EMB"])
    assert {f.check for f in report.findings if f.severity.value != "info"} == {"EMB005"}
    assert all(f.severity.value == "warning" and f.evidence["in_use"] == [im_start, im_end]
               for f in report.findings_for("EMB005"))          # the chat template writes both tokens
    again = fix_model(result.out_dir, tmp_path / "again", untrained_embeddings=True)
    assert again.actions == [] and again.reinitialised == {}


def test_vocab_growth_rows_count_as_reinitialised(tmp_path, factory_model_dir):
    src = broken(tmp_path, factory_model_dir("llama"), zoo.add_tokens_beyond)
    result = fix_model(src, tmp_path / "fixed", vocab=True)
    assert result.reinitialised == {zoo.EMBED: [512, 513, 514, 515], zoo.LM_HEAD: [512, 513, 514, 515]}
    assert any("not trained yet" in a for a in result.actions)
