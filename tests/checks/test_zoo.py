"""The fault zoo: every fault fires its expected check at its expected severity, no check crashes, and healthy
models (every factory preset, tied and untied, and the real SmolLM2) get no warning or error."""
from __future__ import annotations

import pytest

import checks
from tests.checks.conftest import STATIC_CATEGORIES, fired, no_crashes, problems, run_static
from tests.checks.zoo import FAULTS

PRESETS = ("llama", "mistral", "qwen2", "qwen3")
# checks whose firing is tested outside the zoo: VOC001 always reports (info); TOK007 and the tokenizer-source
# checks TOK020-TOK029 need real SentencePiece / tiktoken / tekken files: tests/checks/zoo_sources.py; the
# tool-use template checks TOK030-TOK033 need real tool templates: tests/checks/tokenizer/test_tool_template.py
# the files-and-conversion incident checks on their own builds: CFG064 tests/checks/long_context/test_static_yarn.py,
# TOK034 tests/checks/gguf/test_special_types.py, TOK035 tests/checks/tokenizer/test_system_messages.py,
# WGT009 tests/checks/files/test_tied_head.py
COVERED_ELSEWHERE = {"VOC001", "TOK007", *(f"TOK0{n}" for n in range(20, 34)), "CFG064", "TOK034", "TOK035",
                     "WGT009"}
# the wave-5 families' config fields, each fault built as a broken copy of a transformers-built model of that family:
# CFG010-019 gpt-oss (tests/checks/files/test_gpt_oss_config.py), CFG020-029 MLA / GLM-4.5
# (tests/checks/test_family_config_mla.py), CFG030-039 SmolLM3 / OLMo 3 / MiniMax-M2 / Llama 4
# (tests/checks/files/test_family_config.py), CFG040-049 LFM2 / Granite 4 / Falcon-H1
# (tests/checks/files/test_hybrid_config.py, test_falcon_h1_config.py), CFG050-059 Gated DeltaNet
# (tests/checks/files/test_delta_net.py)
COVERED_ELSEWHERE |= {f"CFG0{n}" for n in range(10, 60)}


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_fires_expected_check(fault, broken_copy, confusion):
    report = run_static(broken_copy(fault.base, fault.apply))
    confusion(fault.name, fault.check, fired(report))
    no_crashes(report)
    assert f"{fault.check}:{fault.severity}" in fired(report), (fault.name, fired(report))


def test_zoo_covers_every_static_check():
    # GGF (GGUF) checks have their own zoo: tests/checks/gguf/test_zoo_gguf.py
    static = {s.id for s in checks.load_all() if s.category in STATIC_CATEGORIES and s.family != "GGF"}
    assert len(FAULTS) >= 25
    assert len({f.name for f in FAULTS}) == len(FAULTS)
    assert static - {f.check for f in FAULTS} - COVERED_ELSEWHERE == set()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("preset", PRESETS)
def test_healthy_factory_model_is_clean(preset, tied, factory_model_dir):
    report = run_static(factory_model_dir(preset, tie_word_embeddings=tied))
    no_crashes(report)
    assert problems(report) == []
    assert {r.status for r in report.checks} <= {"passed", "skipped"}


@pytest.mark.assets
def test_smollm2_is_clean(smollm2_dir):
    report = run_static(smollm2_dir)
    no_crashes(report)
    assert problems(report) == []
