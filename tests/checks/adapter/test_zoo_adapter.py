"""The adapter zoo: every adapter fault fires its LRA check at its severity through the static adapter checks
alone (`check ADAPTER --base BASE --quick --ignore golden,numerics,kv_cache,selftest,generation`), no check
crashes, and healthy peft adapters get no warning or error from any check."""
from __future__ import annotations

import pytest

import checks
from llmdoctor.run.runner import run_checks
from reference_engine.testing.factory import build_model_dir
from tests.checks.conftest import fired, no_crashes, problems
from tests.checks.zoo_adapter import ADAPTER_FAULTS, ATTN
from tests.peft_adapters import make_adapter

import peft  # noqa: E402,F401  (the oracle: scripts/setup.sh --test installs it; never a skip)
STATIC_ONLY = ["golden", "numerics", "kv_cache", "selftest", "generation"]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    return (build_model_dir(root / "llama", "llama", seed=0, num_hidden_layers=3),
            build_model_dir(root / "wider", "llama", seed=1, hidden_size=96, num_hidden_layers=3))


def static_run(base, adapter, **kw):
    return run_checks(base, adapter=adapter, quick=True, ignore=STATIC_ONLY, **kw)


@pytest.mark.parametrize("fault", ADAPTER_FAULTS, ids=[f.name for f in ADAPTER_FAULTS])
def test_adapter_fault_fires(fault, bases, tmp_path, dir_snapshot):
    base, other = bases
    adapter = tmp_path / fault.name
    fault.build(base, other, adapter)
    before = (dir_snapshot(base), dir_snapshot(adapter))
    report = static_run(base, adapter)
    no_crashes(report)
    assert f"{fault.check}:{fault.severity}" in fired(report), (fault.name, fired(report))
    lra = [f for f in report.findings if f.check == fault.check]
    assert all(f.location is not None and f.location.file.startswith(str(adapter)) for f in lra)   # in the adapter
    assert (dir_snapshot(base), dir_snapshot(adapter)) == before      # nothing written into either


def test_zoo_covers_every_adapter_check():
    lra = {s.id for s in checks.load_all() if s.family == "LRA"}
    assert lra - {f.check for f in ADAPTER_FAULTS} == set()


@pytest.mark.parametrize("lora", [dict(target_modules=ALL_LINEAR), dict(target_modules=ATTN, use_rslora=True, r=8),
                                  dict(target_modules=["q_proj", "down_proj"], rank_pattern={"down_proj": 2},
                                       alpha_pattern={"q_proj": 4}, layers_to_transform=[0, 2])],
                         ids=["all_linear", "rslora", "patterns_layers"])
def test_healthy_adapter_is_clean(lora, bases, tmp_path):
    adapter, _ = make_adapter(bases[0], tmp_path / "a", **lora)
    report = static_run(bases[0], adapter)
    no_crashes(report)
    assert problems(report) == []
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"LRA002", "LRA003", "LRA004", "LRA005", "LRA006", "LRA007", "LRA008", "LRA011"} <= ran
    assert {"ACT001", "WGT001"} <= ran           # model checks on the adapted model, the engine included


def test_resized_adapter_gets_only_serving_notes(bases, tmp_path):
    """modules_to_save after resize: the vocabulary checks see the adapter's sizes; only vLLM/llama.cpp notes
    (vLLM refuses modules_to_save, llama.cpp's converter cannot take embeddings: both notes, no warning)."""
    adapter, _ = make_adapter(bases[0], tmp_path / "a", target_modules=ATTN, added_tokens=["<a>", "<b>"],
                              modules_to_save=["embed_tokens", "lm_head"])
    report = static_run(bases[0], adapter)
    no_crashes(report)
    assert problems(report) == []
    (converter,) = [f for f in report.findings if f.check == "LRA013"]
    assert converter.severity.value == "info" and "llama.cpp" in converter.message
    notes = [f for f in report.findings if f.check == "LRA012"]
    assert notes and all(f.severity.value == "info" for f in notes) and "vLLM" in " ".join(f.message for f in notes)
    voc = next(f for f in report.findings if f.check == "VOC001")
    assert voc.evidence["config_vocab_size"] == 514 and voc.evidence["embedding_rows"] == 514
