"""GGF037: a GGUF's pre-tokenizer against the tokenizer.json beside it (llama.cpp#23252). The tiny conversion
(SmolLM2's tokenizer, written by llama.cpp's converter as pre 'smollm') beside its tokenizer.json is quiet; the same
file re-tagged 'llama-bpe' with gguf-py splits newline runs otherwise, and the finding names the string and both
splits. ~3 s each (two 49k-token tokenizers built)."""
from __future__ import annotations

import shutil

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes
from tests.checks.gguf.converted import beside, tiny_conversion
from tests.checks.gguf.edited import edited_gguf


def _ggf037(gguf, hf, directory) -> list[str]:
    path = beside(gguf, hf, directory)
    shutil.copy(hf / "tokenizer.json", directory / "tokenizer.json")
    report = run_checks(path, select=["GGF037"])
    no_crashes(report)
    return [f.message for f in report.findings if f.check == "GGF037" and f.severity.value == "error"]


@pytest.mark.assets
def test_pre_tokenizer_other_than_tokenizer_json_is_named(tmp_path):
    hf, gguf = tiny_conversion()
    retagged = edited_gguf(gguf, tmp_path / "retagged" / gguf.name, {"tokenizer.ggml.pre": "llama-bpe"})
    found = _ggf037(retagged, hf, tmp_path / "retagged")
    assert any(m.startswith("tokenizer.ggml.pre 'llama-bpe' splits") and
               r"'a\n\n\nb': GGUF ['a', '\n\n\n', 'b'] vs tokenizer.json ['a', '\n\n', '\n', 'b']" in m
               for m in found), found


@pytest.mark.assets
def test_pre_tokenizer_as_converted_is_quiet(tmp_path):
    hf, gguf = tiny_conversion()
    assert _ggf037(gguf, hf, tmp_path / "as-converted") == []
