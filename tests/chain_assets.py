"""SmolLM2-135M-Instruct with chat templates that speak tools and thinking, for the serving-chain tests (issue 35).

SmolLM2's own template ignores `tools`. `TOOL_TEMPLATE` is Qwen2.5's Hermes-style template (tools in the system
turn inside <tools>, calls as <tool_call>{json}</tool_call>, results as <tool_response> in a user turn) with
SmolLM2's default system line; llama.cpp's template analysis reads it as a Hermes-style tool-call format.
`THINK_TEMPLATE` adds Qwen3's thinking: the generation prompt opens `<think>\\n`, so what the model writes first is
reasoning. Both exist as a Hugging Face directory (hard links to the cached SmolLM2 files, a new
tokenizer_config.json) for the reference and as a GGUF (the cached Q4_1 with tokenizer.chat_template replaced) for
the server.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.assets import cached_dir, smollm2_dir, smollm2_gguf
from tests.endpoint_assets import copy_gguf

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TOOL_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- '""" + SYSTEM + """' }}{%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}{{- '<|im_start|>system\\n""" + SYSTEM + """<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

THINK_TEMPLATE = """{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}{{- '<|im_start|>system\\n""" + SYSTEM + """<|im_end|>\\n' }}{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}
        {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"""

TEMPLATES = {"tools": TOOL_TEMPLATE, "think": THINK_TEMPLATE}


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
    return cached_dir(f"chain-model-v1-{name}", build)


def gguf(name: str) -> Path:
    """The SmolLM2 Q4_1 GGUF with tokenizer.chat_template = template `name`."""
    from gguf import GGUFReader
    source = smollm2_gguf()
    d = cached_dir(f"chain-gguf-v1-{name}", lambda tmp: copy_gguf(
        GGUFReader(source), tmp / f"smollm2-{name}.gguf", {"tokenizer.chat_template": TEMPLATES[name]}))
    return d / f"smollm2-{name}.gguf"
