"""CFG064: a static yarn factor named. SmolLM2's config with Qwen3's recipe (a yarn block, factor 4, on top of the
model's own 8192 positions) warns with the factor; the same block with the declared length stretched to
8192 x 4 (trained with it, DeepSeek-V3's layout) passes; SmolLM2 as shipped is quiet; a GGUF's yarn keys are
read too. Config only: well under a second each."""
from __future__ import annotations

import pytest

from llmdoctor.run.runner import run_checks
from tests.checks.conftest import no_crashes
from tests.checks.gguf.converted import tiny_conversion
from tests.checks.gguf.edited import edited_gguf
from tests.checks.long_context.test_declared import config_dir


def _yarn(declared: int):
    def edit(raw):
        block = {**raw["rope_parameters"], "rope_type": "yarn", "factor": 4.0,
                 "original_max_position_embeddings": 8192}
        return {**raw, "max_position_embeddings": declared, "rope_parameters": block}
    return edit


def _cfg064(path) -> list[tuple[str, str]]:
    report = run_checks(path, select=["CFG064"])
    no_crashes(report)
    return [(f.severity.value, f.message) for f in report.findings if f.check == "CFG064"]


@pytest.mark.assets
def test_static_yarn_added_on_top_of_the_native_length_is_named(smollm2_dir, tmp_path):
    found = _cfg064(config_dir(smollm2_dir, tmp_path / "qwen3_recipe", _yarn(8192)))
    assert [s for s, _ in found] == ["warning"], found
    assert "yarn rope factor 4 is static (original 8192 positions, stretched to 32768)" in found[0][1], found
    assert "below 8192 tokens the model reads worse" in found[0][1], found


@pytest.mark.assets
def test_static_yarn_the_model_was_trained_with_is_quiet(smollm2_dir, tmp_path):
    assert _cfg064(config_dir(smollm2_dir, tmp_path / "trained", _yarn(32768))) == []


@pytest.mark.assets
def test_no_yarn_block_is_quiet(smollm2_dir, tmp_path):
    assert _cfg064(config_dir(smollm2_dir, tmp_path / "plain")) == []


@pytest.mark.assets
def test_static_yarn_read_from_a_gguf(tmp_path):
    _, gguf = tiny_conversion()        # context_length 256 = original 64 x factor 4: trained with it
    assert _cfg064(gguf) == []
    served = edited_gguf(gguf, tmp_path / "qwen3_recipe.gguf", {"llama.context_length": 128})
    found = _cfg064(served)
    assert [s for s, _ in found] == ["warning"] and "yarn rope factor 4 is static" in found[0][1], found
