"""The GGUF fault zoo: every fault fires its GGF check, healthy GGUFs are clean, no check crashes; fuzzed GGUF
bytes never crash the reader or `check`."""
from __future__ import annotations

import pytest

import checks
from llmdoctor.run.runner import run_checks
from tests.checks.conftest import fired, no_crashes, problems
from tests.checks.zoo_gguf import FAULTS, healthy

GGUF_CHECKS = ["GGF", "files", "config", "weights", "vocab", "embeddings", "tokenizer"]


def run_gguf(path):
    return run_checks(path, select=GGUF_CHECKS, device="cpu")


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_gguf_fault_fires_its_check(fault, tmp_path, confusion):
    report = run_gguf(fault.build(tmp_path))
    confusion(f"gguf:{fault.name}", fault.check_id, fired(report))
    no_crashes(report)
    assert any(f.check == fault.check_id and f.severity.value != "info" for f in report.findings), \
        (fault.name, fired(report))


def test_zoo_covers_every_ggf_check():
    ids = {s.id for s in checks.load_all() if s.family == "GGF"}
    assert len(FAULTS) >= 15 and len({f.name for f in FAULTS}) == len(FAULTS)
    # GGF020's every rule: tests/checks/long_context/test_gguf_keys.py (alone) and test_compare.py (a config.json
    # beside); GGF030 (DeltaNet value head size vs llama.cpp's) a hybrid converted by the pinned converter:
    # tests/reference_engine/core/test_gguf_qwen35.py; GGF035 (a hybrid's layer kinds) a Granite 4 GGUF from the
    # converter: tests/reference_engine/core/test_granite_gguf.py; GGF036 (turn tokens typed as text), GGF037
    # (a tokenizer.json beside) and GGF038 (BOS) on converted and published files:
    # tests/checks/gguf/test_special_types.py, test_pre_tokenizer_beside.py, test_bos.py
    assert ids - {f.check_id for f in FAULTS} - {"GGF030", "GGF035", "GGF036", "GGF037", "GGF038"} == set()


@pytest.mark.parametrize("preset", ["llama", "qwen2", "qwen3"])
def test_healthy_gguf_is_clean(preset, tmp_path):
    report = run_gguf(healthy(tmp_path, preset))
    no_crashes(report)
    assert problems(report) == []
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert {"GGF001", "GGF003", "GGF004", "GGF005", "GGF008", "GGF011", "VOC002", "WGT001"} <= ran
    skipped = {r.id: r.reason for r in report.checks if r.status == "skipped"}
    assert "FIL001" in skipped and "GGUF" in skipped["FIL001"]


def test_a_directory_holding_one_gguf_is_a_model(tmp_path):
    path = healthy(tmp_path)
    report = run_gguf(tmp_path)
    assert problems(report) == [] and report.model == str(tmp_path)
    assert path.exists()


@pytest.mark.assets
@pytest.mark.parametrize("name,wrong", [("llama-bpe", "gpt-2"), ("qwen2", "default")])
def test_wrong_pre_on_a_real_vocab_names_the_expected_value(tmp_path, name, wrong):
    """Llama-3's vocabulary labelled gpt-2 / Qwen2's labelled default: GGF003 recomputes the converter's answer."""
    from tests import assets_gguf
    from tests.checks.zoo_gguf import rewrite_metadata
    from tests.conftest import _asset
    vocab = _asset(assets_gguf.llamacpp_vocab_gguf, name)
    assert run_checks(vocab.gguf, select=["GGF003"]).findings == []
    path = rewrite_metadata(vocab.gguf, tmp_path / "v.gguf", {"tokenizer.ggml.pre": wrong})
    findings = [f for f in run_checks(path, select=["GGF003"]).findings]
    assert [f.severity.value for f in findings] == ["error"]
    assert name in findings[0].evidence["candidates"] and findings[0].evidence["pre"] == wrong
    assert repr(name) in findings[0].message


def test_template_bos_meeting_add_bos_is_a_note(tmp_path):
    """llama.cpp strips the template's BOS when it adds its own (common/chat.cpp): a note, not a warning."""
    from tests.checks.zoo_gguf import CHAT_TEMPLATE, _meta
    path = _meta(tokenizer__ggml__add_bos_token=True,
                 tokenizer__chat_template="{{ bos_token }}" + CHAT_TEMPLATE)(tmp_path)
    report = run_gguf(path)
    (note,) = [f for f in report.findings if f.check == "GGF005"]
    assert note.severity.value == "info" and "add_special" in note.message
    assert problems(report) == []
