"""TOK030-TOK033 over every chat template llama.cpp ships (models/templates/ in the llama-cpp-python 0.3.36 sdist,
which llama.cpp fetches from the models' repositories): every template the format table recognises is clean,
over a tokenizer holding the table's markers as tokens, except the released templates with a real problem.
The templates are a cached asset (tests/assets_gguf.py llamacpp_chat_templates): fetched once and kept, a fetch
that fails is a test failure, never a skip. The counts docs/tool-templates.md quotes are asserted here."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from checks.catalogue.registry import Skip
from checks.tokenizer import tool_template
from reference_engine.generate.tool_calls import FORMATS, recognise
from reference_engine.testing import factory
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests.assets import or_fail
from tests.assets_gguf import llamacpp_chat_templates

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
    return or_fail(llamacpp_chat_templates)


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
    """docs/tool-templates.md: 70 templates, 67 mention tools, 35 recognised (gpt-oss's harmony among them), 29
    of them clean (no finding at all), the 5 KNOWN with a warning or error, Granite 3.3 with TOK033's info note.
    ~30 s on a loaded 2-core machine: four checks render each of the 35 recognised templates over several
    conversations."""
    spec, flagged, noted, recognised = tokenizer_json(), {}, set(), 0
    shipped = templates()
    for name, template in sorted(shipped.items()):
        if recognise(template) is None:
            continue
        recognised += 1
        tok = Tokenizer.from_json(spec, {"chat_template": template, "bos_token": "<s>", "eos_token": "</s>"})
        ctx = types.SimpleNamespace(tokenizer=tok, model_dir=Path("/nonexistent"))
        for check in CHECKS:
            try:
                problems = list(check(ctx))
            except Skip:
                continue
            if any(p.severity != "info" for p in problems):
                flagged.setdefault(name, set()).add(check.__name__)
            elif problems:
                noted.add(name)
    assert len(shipped) == 70 and sum("tool" in t for t in shipped.values()) == 67
    assert recognised == 35 and recognised - len(flagged.keys() | noted) == 29
    assert flagged == KNOWN and noted - flagged.keys() == {"ibm-granite-granite-3.3-2B-Instruct.jinja"}
