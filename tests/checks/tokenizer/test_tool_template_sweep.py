"""TOK030-TOK033 over every chat template llama.cpp ships (models/templates/ in the llama-cpp-python 0.3.36 sdist,
which llama.cpp fetches from the models' repositories): every template the format table recognises is clean,
over a tokenizer holding the table's markers as tokens, except the released templates with a real problem.
Skipped when the sdist is not in the cache (tests/assets.py's cache root, sdist/)."""
from __future__ import annotations

import tarfile
import types
from pathlib import Path

import pytest

from checks.registry import Skip
from checks.tokenizer import tool_template
from reference_engine.generate.tool_calls import FORMATS, recognise
from reference_engine.testing import factory
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests.assets import LLAMACPP_PACKAGE, cache_root

SDIST = f"llama_cpp_python-{LLAMACPP_PACKAGE.split('==')[1]}"
CHECKS = (tool_template.tool_template_renders, tool_template.tool_definitions_rendered,
          tool_template.tool_markers_atomic, tool_template.tool_call_round_trip)
# the released templates' own problems (docs/tool-templates.md), each confirmed by reading the template
KNOWN = {
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": {"tool_definitions_rendered"},   # never reads `tools`
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": {"tool_definitions_rendered"},
    "deepseek-ai-DeepSeek-V3.1.jinja": {"tool_definitions_rendered"},
    "fireworks-ai-llama-3-firefunction-v2.jinja": {"tool_template_renders"},   # reads `functions`, not `tools`
    "llama-cpp-deepseek-r1.jinja": {"tool_template_renders"},   # a generator piped into tojson
}
OTHER_TOKENS = ["<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|im_start|>", "<|im_end|>", "<|end|>",
                "</s>", "<|END_OF_TURN_TOKEN|>", "<｜end▁of▁sentence｜>", "<end_of_sentence>"]


def templates() -> dict[str, str]:
    archive = cache_root() / "sdist" / f"{SDIST}.tar.gz"
    if not archive.is_file():
        pytest.skip(f"{archive} is not cached")
    prefix = f"{SDIST}/vendor/llama.cpp/models/templates/"
    with tarfile.open(archive, "r:gz") as tf:
        return {Path(m.name).name: tf.extractfile(m).read().decode("utf-8") for m in tf
                if m.isfile() and m.name.startswith(prefix) and m.name.endswith(".jinja")}


def tokenizer_json() -> dict:
    spec = factory.tokenizer_json()
    have = {t["content"] for t in spec["added_tokens"]}
    tokens = sorted({m for f in FORMATS.values() for m in f.markers} | set(OTHER_TOKENS) - have)
    next_id = max(t["id"] for t in spec["added_tokens"]) + 1
    spec["added_tokens"] += [{"id": next_id + i, "content": t, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True} for i, t in enumerate(tokens)]
    return spec


@pytest.mark.assets
def test_recognised_llamacpp_templates_are_clean_but_for_their_known_problems():
    spec, flagged, recognised = tokenizer_json(), {}, 0
    for name, template in sorted(templates().items()):
        if recognise(template) is None:
            continue
        recognised += 1
        tok = Tokenizer.from_json(spec, {"chat_template": template, "bos_token": "<s>", "eos_token": "</s>"})
        ctx = types.SimpleNamespace(tokenizer=tok, model_dir=Path("/nonexistent"))
        for check in CHECKS:
            try:
                if any(p.severity != "info" for p in check(ctx)):
                    flagged.setdefault(name, set()).add(check.__name__)
            except Skip:
                pass
    assert recognised >= 30
    assert flagged == KNOWN
