"""The reference engine's self-test (ENG): silent on a healthy engine, firing on an engine or tokenizer
sabotaged the way real bugs break them, worded as an llmdoctor bug (never a model fault); retired ids
(KVC001, KVC002, ACT004) still resolve in --select/--ignore and explain; GLD001 keeps only what files decide."""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

import checks
from checks.runtime import golden
from checks.engine import selftest
from checks.catalogue.inputs import CheckInputs
from checks.catalogue.registry import REGISTRY, RETIRED, RegistryError, check
from llmdoctor.cli import cli
from llmdoctor.reporting.explain_text import explain
from llmdoctor.run.runner import run_checks
from llmdoctor.run.selection import select_checks
from tests.checks.engine.test_kv_cache_checks import sabotage_writes

ENG = ("ENG001", "ENG002", "ENG003", "ENG004")
HYBRID_ENG = ("ENG010", "ENG011", "ENG012", "ENG013")    # recurrent layers only (test_hybrid_selftest.py)


@pytest.fixture
def ctx(factory_model_dir):
    return CheckInputs(factory_model_dir("llama"), quick=True)


class Tampered:
    """A tokenizer whose padded batches are changed by `edit(batch)` (lists or tensors, as the caller asked)."""

    def __init__(self, tok, edit):
        self.tok, self.edit = tok, edit

    def __call__(self, texts, **kw):
        batch = self.tok(texts, **kw)
        self.edit(batch)
        return batch

    def __len__(self):
        return len(self.tok)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def mask_everything(batch):
    m = batch["attention_mask"]
    batch["attention_mask"] = torch.ones_like(m) if isinstance(m, torch.Tensor) else [[1] * len(r) for r in m]


def arange_positions(batch):
    m = batch["attention_mask"]
    width = m.shape[1] if isinstance(m, torch.Tensor) else len(m[0])
    rows = [list(range(width)) for _ in range(len(m))]
    batch["position_ids"] = torch.tensor(rows) if isinstance(m, torch.Tensor) else rows


def test_catalogue_family_and_wording():
    checks.load_all()
    specs = [REGISTRY[i] for i in ENG]
    assert {s.category for s in specs} == {"selftest"} and {s.severity.value for s in specs} == {"error"}
    for s in specs:
        assert s.summary.startswith("Reference engine self-test:")
        assert "bug in llmdoctor's reference engine, not a fault of this model" in s.hint
    assert not {"KVC001", "KVC002", "ACT004"} & set(REGISTRY)


def test_healthy_engine_passes_every_self_test(factory_model_dir):
    report = run_checks(factory_model_dir("qwen3"), select=["selftest"], quick=True)
    statuses = {c.id: c.status for c in report.checks}
    assert statuses == {**dict.fromkeys(ENG, "passed"), **dict.fromkeys(HYBRID_ENG, "skipped")}, \
        [f.evidence for f in report.findings]
    assert report.findings == []


def test_eng001_fires_when_decode_writes_to_the_wrong_slot(ctx, monkeypatch):
    sabotage_writes(monkeypatch, ctx.engine.cache, lambda slots: slots.numel() == 1)
    (problem,) = selftest.paged_decode_vs_recompute(ctx)
    assert problem.message.startswith("reference engine self-test: incremental decode")
    assert problem.evidence["rel_diff"] > 1e-3


def test_eng002_fires_when_batched_writes_are_shifted(ctx, monkeypatch):
    sabotage_writes(monkeypatch, ctx.engine.cache, lambda slots: slots.numel() > 1 and
                    bool((slots.diff() != 1).any()))                      # only multi-sequence steps
    (problem,) = selftest.padded_batch_vs_alone(ctx)
    assert problem.message.startswith("reference engine self-test: batched logits differ")


def test_eng002_fires_on_positions_that_ignore_padding(ctx):
    ctx._cache["tokenizer"] = Tampered(ctx.tokenizer, arange_positions)
    (problem,) = selftest.padded_batch_vs_alone(ctx)
    assert "positions" in problem.message


def test_eng003_fires_when_the_mask_covers_padding(ctx):
    ctx._cache["tokenizer"] = Tampered(ctx.tokenizer, mask_everything)
    (problem,) = selftest.mask_covers_padding(ctx)
    assert problem.message.startswith("reference engine self-test: attention mask does not match")
    assert problem.evidence["valid_ratio"] == [1.0, 1.0]


@pytest.mark.parametrize("edit, words", [(mask_everything, "attention_mask sums to"),
                                         (arange_positions, "position_ids over real tokens")])
def test_eng004_fires_on_broken_batch_invariants_and_gld001_does_not(ctx, edit, words):
    assert list(selftest.batch_encoding_invariants(ctx)) == []
    ctx._cache["tokenizer"] = Tampered(ctx.tokenizer, edit)
    found = list(selftest.batch_encoding_invariants(ctx))
    assert found and all(p.message.startswith("reference engine self-test: tokenizer batch:") for p in found)
    assert any(words in p.message for p in found)
    # GLD001 judges the model's files: llmdoctor's own batch bug is not reported as a tokenizer fault there
    assert not [p for p in golden.golden_tokenizer(ctx) if "validate()" in p.message]


@pytest.mark.parametrize("old, new", [(k, v[0]) for k, v in RETIRED.items()])
def test_retired_ids_select_ignore_and_explain_their_successor(old, new):
    specs = checks.load_all()
    notes: list[str] = []
    assert [s.id for s in select_checks(specs, [old], notes=notes)] == [new]
    assert notes and old in notes[0] and new in notes[0]
    assert new not in [s.id for s in select_checks(specs, [new[:3]], [old.lower()], notes=[])]
    text, code = explain(old)
    assert code == 0 and text.startswith(f"{old} is retired: it now runs as {new}") and f"{new}: " in text


def test_retired_id_on_the_command_line_notes_the_successor():
    result = CliRunner().invoke(cli, ["checks", "--select", "KVC001"])
    assert result.exit_code == 0 and "ENG001" in result.output and "KVC001 is retired" in result.output
    assert "KVC001 -> ENG001" in result.output          # the catalogue lists what was retired
    listed = CliRunner().invoke(cli, ["checks", "--select", "selftest"])
    assert [line.split()[:2] for line in listed.output.splitlines() if line.startswith("ENG")] == [
        [i, "selftest"] for i in ENG + HYBRID_ENG]


def test_a_retired_id_can_never_be_declared_again():
    with pytest.raises(RegistryError, match="retired"):
        @check("ACT004", category="activations")
        def again(ctx):
            """Summary."""
    assert "ACT004" not in REGISTRY
