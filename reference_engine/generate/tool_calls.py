"""The tool-call formats of the model families: one table, read by every tool-call parser in the project.

A chat model that uses tools writes its calls in its family's own syntax, and a server's parser must read that
syntax back into OpenAI's `tool_calls`. Each FORMATS entry says how to recognise the format from a chat template's
source, which markers the template writes (they must be single tokens, or every parser misses them), how to write
calls (what the model generates) and how to read calls out of generated text. The checks (TOK030-TOK033) render a
template's own tool call and read it back with this table; the endpoint probes use `find_calls` to tell a call
left as raw text in a server's `content`.

    format            families                              writes
    hermes            Hermes 2 Pro/3, Qwen2.5, Qwen3, Granite 4  <tool_call>{"name": .., "arguments": {..}}</tool_call>
    qwen3_coder       Qwen3-Coder, Qwen3.5, Nemotron 3 Nano     <tool_call><function=N><parameter=K>V</parameter>..
    mistral_v11       Mistral Small 3.2, Devstral, Magistral    [TOOL_CALLS]N[ARGS]{..} (optional [CALL_ID]id)
    mistral_v3        Mistral 7B v0.3, Nemo, Small 3.0/3.1      [TOOL_CALLS][{"name": .., "arguments": {..}, "id": ..}]
    granite           Granite 3.x                               <|tool_call|>[{"name": .., "arguments": {..}}]
    command_r7b       Command R7B                               <|START_ACTION|>[{"tool_name": .., "parameters": ..}]
    deepseek_r1       DeepSeek R1, its distills                 <｜tool▁call▁begin｜>function<｜tool▁sep｜>N```json..```
    deepseek_v3_1     DeepSeek V3.1                             <｜tool▁call▁begin｜>N<｜tool▁sep｜>{..}
    functionary_v3_2  Functionary medium v3.2                   >>>N\\n{..}
    functionary_v3_1  Functionary medium v3.1 (Llama 3.1)       <function=N>{..}</function>
    firefunction_v2   FireFunction v2                           functools[{"name": .., "arguments": {..}}]
    apriel            Apriel 1.5, 1.6                           <tool_calls>[{"name": .., "arguments": ..}]</tool_calls>
    minimax_m1        MiniMax-M1                                <tool_calls>\\n{"name": ..}\\n{"name": ..}</tool_calls>
    llama3_json       Llama 3.1, 3.2, 3.3                       {"name": .., "parameters": {..}}, <|python_tag|>
    harmony           gpt-oss                                   <|start|>assistant to=functions.N<|channel|>commentary
                                                                json<|message|>{..}<|call|> (generate/harmony.py)

Not in the table: Phi-4-mini (its released template never writes an assistant call, so there is nothing to hold
a parser to) and Gemma's ```tool_code``` convention (Gemma 3's template does not mention tools; it is a prompt
convention, not a format a template writes). Cross-checked against llama.cpp's chat parsers (common/chat*.cpp,
which recognise templates by the same literals) and vLLM's tool parsers of the same names.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import regex

from reference_engine.generate import harmony
from reference_engine.generate import tool_call_syntax as syntax
from reference_engine.generate.tool_call_types import ParsedCalls, ToolCall, decode_arguments

__all__ = ["FORMATS", "ToolCallFormat", "ToolCall", "ParsedCalls", "decode_arguments", "mentions_tools",
           "recognise", "render_calls", "parse_calls", "find_calls"]


@dataclass(frozen=True)
class ToolCallFormat:
    """One family's tool-call syntax.

    `requires`: literals that all occur in a template of this format (`excludes`: none of these does), tried in
    table order, so a more specific format comes before the one it extends. `markers`: the control strings the
    template writes around calls and tool definitions; each must be one token of the tokenizer. `call_markers`:
    the subset a parser needs to find a call (what `find_calls` looks for). `parallel`: the format carries
    several calls in one assistant turn. `servers`: the parser's name in vLLM (`--tool-call-parser`) and llama.cpp
    (its chat format), for the evidence."""
    name: str
    families: str
    requires: tuple[str, ...]
    markers: tuple[str, ...]
    call_markers: tuple[str, ...]
    render: Callable[[list[ToolCall]], str]
    parse: Callable[[str], ParsedCalls]
    excludes: tuple[str, ...] = ()
    parallel: bool = True
    servers: dict = field(default_factory=dict)

    def matches(self, template: str) -> bool:
        return all(s in template for s in self.requires) and not any(s in template for s in self.excludes)


_DS = (syntax.DS_CALLS_BEGIN, syntax.DS_CALL_BEGIN, syntax.DS_SEP, syntax.DS_CALL_END, syntax.DS_CALLS_END)
_MISTRAL = ("[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]")

_TABLE = (
    ToolCallFormat("harmony", "gpt-oss (harmony)", (harmony.CHANNEL, harmony.CALL), harmony.MARKERS,
                   (harmony.CALL_MARKER,), harmony.render_calls, harmony.parse_calls, parallel=False,
                   servers={"vllm": "openai", "llama.cpp": "GPT-OSS"}),
    ToolCallFormat("qwen3_coder", "Qwen3-Coder", ("<tool_call>", "<function=", "<parameter="),
                   ("<tool_call>", "</tool_call>"), ("<tool_call>",), syntax.qwen3_coder_render,
                   syntax.qwen3_coder_parse, servers={"vllm": "qwen3_coder", "llama.cpp": "Qwen3 Coder"}),
    ToolCallFormat("apriel", "Apriel 1.5, 1.6", ("<tool_calls>[",), ("<tool_calls>", "</tool_calls>"),
                   ("<tool_calls>",), syntax.json_list_renderer("<tool_calls>", "</tool_calls>"),
                   syntax.marker_json_parser("apriel", "<tool_calls>", "</tool_calls>"),
                   servers={"llama.cpp": "Apriel 1.5"}),
    ToolCallFormat("minimax_m1", "MiniMax-M1", ("<tool_calls>", "<beginning_of_sentence>"),
                   ("<tool_calls>", "</tool_calls>"), ("<tool_calls>",), syntax.minimax_m1_render,
                   syntax.marker_json_parser("minimax_m1", "<tool_calls>", "</tool_calls>"),
                   servers={"vllm": "minimax", "llama.cpp": "MiniMax-M1"}),
    ToolCallFormat("hermes", "Hermes 2 Pro/3, Qwen2.5, Qwen3, Granite 4", ("<tool_call>", "</tool_call>"),
                   ("<tool_call>", "</tool_call>"), ("<tool_call>",), syntax.hermes_render,
                   syntax.marker_json_parser("hermes", "<tool_call>", "</tool_call>"),
                   excludes=("<invoke name=", "<arg_key>"), servers={"vllm": "hermes", "llama.cpp": "Hermes 2 Pro"}),
    ToolCallFormat("mistral_v11", "Mistral Small 3.2, Devstral, Magistral, Ministral 3", ("[TOOL_CALLS]", "[ARGS]"),
                   ("[TOOL_CALLS]", "[ARGS]") + _MISTRAL, ("[TOOL_CALLS]",), syntax.mistral_v11_render,
                   syntax.mistral_v11_parse, servers={"vllm": "mistral", "llama.cpp": "Mistral Small 3.2 / Magistral"}),
    ToolCallFormat("mistral_v3", "Mistral 7B v0.3, Nemo, Small 3.0/3.1", ("[TOOL_CALLS]",),
                   ("[TOOL_CALLS]",) + _MISTRAL, ("[TOOL_CALLS]",),
                   syntax.json_list_renderer("[TOOL_CALLS]", with_id=True),
                   syntax.marker_json_parser("mistral_v3", "[TOOL_CALLS]"), excludes=("[ARGS]",),
                   servers={"vllm": "mistral", "llama.cpp": "Mistral Nemo"}),
    ToolCallFormat("granite", "Granite 3.x", ("<|tool_call|>", "<|start_of_role|>"), ("<|tool_call|>",),
                   ("<|tool_call|>",), syntax.json_list_renderer("<|tool_call|>"),
                   syntax.marker_json_parser("granite", "<|tool_call|>"),
                   servers={"vllm": "granite", "llama.cpp": "Granite"}),
    ToolCallFormat("command_r7b", "Command R7B", ("<|START_ACTION|>",), ("<|START_ACTION|>", "<|END_ACTION|>"),
                   ("<|START_ACTION|>",),
                   syntax.json_list_renderer("<|START_ACTION|>", "<|END_ACTION|>", name_key="tool_name",
                                             argument_key="parameters"),
                   syntax.marker_json_parser("command_r7b", "<|START_ACTION|>", "<|END_ACTION|>",
                                             name_key="tool_name", argument_keys=("parameters",),
                                             id_key="tool_call_id"),
                   servers={"llama.cpp": "Command R7B"}),
    ToolCallFormat("deepseek_r1", "DeepSeek R1 and its distills", (syntax.DS_CALL_BEGIN, "```json"), _DS,
                   (syntax.DS_CALL_BEGIN + "function",), syntax.deepseek_r1_render, syntax.deepseek_parse,
                   servers={"vllm": "deepseek_v3", "llama.cpp": "DeepSeek R1"}),
    ToolCallFormat("deepseek_v3_1", "DeepSeek V3.1", (syntax.DS_CALL_BEGIN,), _DS, (syntax.DS_CALL_BEGIN,),
                   syntax.deepseek_v3_1_render, syntax.deepseek_parse,
                   servers={"vllm": "deepseek_v31", "llama.cpp": "DeepSeek V3.1"}),
    ToolCallFormat("functionary_v3_2", "Functionary medium v3.2", (">>>all", ">>>"), (), (">>>",),
                   syntax.functionary_v3_2_render, syntax.functionary_v3_2_parse,
                   servers={"llama.cpp": "Functionary v3.2"}),
    ToolCallFormat("functionary_v3_1", "Functionary medium v3.1 (Llama 3.1)", ("<function=", "</function>"),
                   ("<|python_tag|>",), ("<function=",), syntax.function_tag_render, syntax.function_tag_parse,
                   excludes=("<parameter=",), servers={"llama.cpp": "Functionary v3.1 Llama 3.1"}),
    ToolCallFormat("firefunction_v2", "FireFunction v2", ("functools[",), (), ("functools[",),
                   syntax.json_list_renderer(" functools"),
                   syntax.marker_json_parser("firefunction_v2", "functools"),
                   servers={"llama.cpp": "FireFunction v2"}),
    ToolCallFormat("llama3_json", "Llama 3.1, 3.2, 3.3", ("<|start_header_id|>", '"parameters"'),
                   ("<|python_tag|>", "<|eom_id|>"), ("{", "<|python_tag|>"), syntax.llama3_render,
                   syntax.llama3_parse, parallel=False, servers={"vllm": "llama3_json", "llama.cpp": "Llama 3.x"}),
)
FORMATS: dict[str, ToolCallFormat] = {f.name: f for f in _TABLE}

# a template "mentions tools" when it reads the tools variable or renders tool calls / tool results
_TOOLS_WORD = regex.compile(r"\btools\b|\btool_calls\b|['\"]tool['\"]|\bavailable_tools\b|\bcustom_tools\b")


def mentions_tools(template: str | None) -> bool:
    """Whether a chat template's source reads `tools`, renders `tool_calls` or handles the "tool" role."""
    return bool(template) and bool(_TOOLS_WORD.search(template))


def recognise(template: str | None) -> ToolCallFormat | None:
    """The format a template writes, from the literals in its source (the first table entry that matches), or
    None when none does. A template that never writes a call is recognised by its instructions only, if at all."""
    if not template:
        return None
    return next((f for f in _TABLE if f.matches(template)), None)


def render_calls(fmt: ToolCallFormat | str, calls: list[ToolCall]) -> str:
    """The text a model of this format generates for `calls` (what its parser reads back)."""
    return _format(fmt).render(list(calls))


def parse_calls(fmt: ToolCallFormat | str, text: str) -> ParsedCalls:
    """Calls read out of generated text with one format's parser; never raises."""
    fmt = _format(fmt)
    result = fmt.parse(text or "")
    result.format = fmt.name
    return result


def find_calls(text: str, formats=None) -> ParsedCalls | None:
    """The first format (in table order, or among `formats`) that reads at least one call out of `text`, else the
    first whose markers hold a call it cannot read (`errors`: e.g. double-encoded arguments), or None: tells whether
    a server's plain `content` holds a call it should have returned in `tool_calls`."""
    broken = None
    for fmt in [_format(f) for f in formats] if formats else _TABLE:
        if any(m in (text or "") for m in fmt.call_markers):
            result = parse_calls(fmt, text)
            if result.calls:
                return result
            broken = broken or (result if result.errors else None)
    return broken


def _format(fmt: ToolCallFormat | str) -> ToolCallFormat:
    if isinstance(fmt, ToolCallFormat):
        return fmt
    if fmt not in FORMATS:
        raise KeyError(f"unknown tool-call format {fmt!r} (known: {', '.join(FORMATS)})")
    return FORMATS[fmt]
