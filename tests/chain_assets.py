"""SmolLM2-135M-Instruct with chat templates that speak tools and thinking, for the serving-chain tests.

SmolLM2's own template ignores `tools`. `TOOL_TEMPLATE` (chain_templates/tools.jinja) is Qwen2.5's Hermes-style
template (tools in the system turn inside <tools>, calls as <tool_call>{json}</tool_call>, results as
<tool_response> in a user turn) with SmolLM2's default system line; llama.cpp's template analysis reads it as a
Hermes-style tool-call format. `THINK_TEMPLATE` (think.jinja) adds Qwen3's thinking: the generation prompt opens
`<think>\\n`, so what the model writes first is reasoning (with `enable_thinking` false it writes Qwen3's closed
block `<think>\\n\\n</think>\\n\\n` instead: what the model writes is the answer). Both exist as a Hugging
Face directory (hard links to the cached SmolLM2 files, a new tokenizer_config.json) for the reference and as a
GGUF (the cached Q4_1 with tokenizer.chat_template replaced) for the server.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.assets import cached_dir, smollm2_dir, smollm2_gguf
from tests.endpoint_assets import copy_gguf

TEMPLATE_DIR = Path(__file__).parent / "chain_templates"
TOOL_TEMPLATE = (TEMPLATE_DIR / "tools.jinja").read_text()
THINK_TEMPLATE = (TEMPLATE_DIR / "think.jinja").read_text()
TEMPLATES = {"tools": TOOL_TEMPLATE, "think": THINK_TEMPLATE}
VERSIONS = {"tools": 1, "think": 2}         # a template's cached copies are rebuilt when it changes


def model_dir(name: str) -> Path:
    """The SmolLM2 directory with template `name`: hard links to the cached files (the engine refuses weights that
    are symlinks out of the directory), a tokenizer_config.json of its own."""
    source = smollm2_dir()

    def build(tmp: Path) -> None:
        for f in source.iterdir():
            if f.name != "tokenizer_config.json":
                try:
                    os.link(f, tmp / f.name)
                except OSError:         # another filesystem
                    shutil.copy2(f, tmp / f.name)
        config = json.loads((source / "tokenizer_config.json").read_text())
        (tmp / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATES[name]}))
    return cached_dir(f"chain-model-v{VERSIONS[name]}-{name}", build)


def gguf(name: str) -> Path:
    """The SmolLM2 Q4_1 GGUF with tokenizer.chat_template = template `name`."""
    from gguf import GGUFReader
    source = smollm2_gguf()
    d = cached_dir(f"chain-gguf-v{VERSIONS[name]}-{name}", lambda tmp: copy_gguf(
        GGUFReader(source), tmp / f"smollm2-{name}.gguf", {"tokenizer.chat_template": TEMPLATES[name]}))
    return d / f"smollm2-{name}.gguf"
