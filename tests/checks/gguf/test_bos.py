"""GGF038: BOS added as the model was trained. Gemma 3 270M's GGUF (metadata copied with gguf-py) with
add_bos_token false is named alone (Gemma is trained with <bos>) and beside its own tokenizer files (which add
it); the tiny conversion with add_bos_token true beside SmolLM2's tokenizer (which adds none) is named the other
way. The files as published and as converted are quiet. ~30 s in all: Gemma's 262k-token vocabulary written once and
its tokenizer.json read once."""
from __future__ import annotations

import shutil

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes
from tests.checks.gguf.converted import beside, tiny_conversion
from tests.checks.gguf.edited import edited_gguf
from tests import assets
from tests.assets import or_fail

ADD_BOS = "tokenizer.ggml.add_bos_token"


def _ggf038(path) -> list[str]:
    report = run_checks(path, select=["GGF038"])
    no_crashes(report)
    return [f.message for f in report.findings if f.check == "GGF038" and f.severity.value == "warning"]


@pytest.fixture(scope="module")
def gemma_without_bos(tmp_path_factory):
    """Gemma 3 270M's GGUF metadata (no tensors) with add_bos_token false, written once."""
    src = or_fail(assets.gemma3_270m_gguf)
    return edited_gguf(src, tmp_path_factory.mktemp("gemma-no-bos") / src.name, {ADD_BOS: False}, keep_tensors=False)


def _placed(gguf, directory, with_tokenizer: bool):
    directory.mkdir()
    (directory / gguf.name).hardlink_to(gguf)
    if with_tokenizer:
        hf = or_fail(assets.gemma3_270m_dir)
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(hf / file, directory / file)
    return directory / gguf.name


@pytest.mark.assets
@pytest.mark.parametrize("with_tokenizer", [False, True], ids=["alone", "beside_its_tokenizer"])
def test_bos_dropped_from_a_model_trained_with_it_is_named(gemma_without_bos, tmp_path, with_tokenizer):
    found = _ggf038(_placed(gemma_without_bos, tmp_path / "no-bos", with_tokenizer))
    source = "the tokenizer.json beside it adds it" if with_tokenizer else "gemma3 is trained with it"
    assert any(m.startswith(f"tokenizer.ggml.add_bos_token is False but {source}: llama.cpp sends raw prompts "
                            "without '<bos>'") for m in found), found


@pytest.mark.assets
def test_bos_kept_is_quiet():
    assert _ggf038(or_fail(assets.gemma3_270m_gguf)) == []       # as published, alone in its folder


@pytest.mark.assets
def test_bos_the_tokenizer_never_adds_is_named(tmp_path):
    hf, gguf = tiny_conversion()
    assert _ggf038(_with_tokenizer(gguf, hf, tmp_path / "as-converted")) == []
    extra = edited_gguf(gguf, tmp_path / "extra" / gguf.name, {ADD_BOS: True})
    found = _ggf038(_with_tokenizer(extra, hf, tmp_path / "extra"))
    assert any(m.startswith("tokenizer.ggml.add_bos_token is true but the tokenizer.json beside the GGUF adds no "
                            "BOS") for m in found), found


def _with_tokenizer(gguf, hf, directory):
    path = beside(gguf, hf, directory)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf / file, directory / file)
    return path
